"""Code shared by mnemo's Python tests (tests/python/test_*.py), by concept:

- paths: the repository's folders, the real models' file names, the build's test tools;
- server: `Server` (a `mnemo serve` process on a free loopback port) and checks on a running one;
- redis_server: `Redis` (a redis-server of the test's own on loopback) and `free_port`;
- skip_gate: the skip rule under CI (tests/python/skip_allowlist.txt), registered by conftest.py;
- cache: token-id prompts and greedy completions for the prompt-cache and replica tests;
- chat_templates: the jinja2 reference renderer of chat templates and the `mnemo template` harness;
- tiny_models: tiny random-weight model files (tests/tools/make_tiny_model);
- reference: the numpy references (tests/reference/) and checks against llama.cpp's fixtures.

Test modules import from here (tests/python/conftest.py puts tests/python on sys.path), never
from one another. Pytest fixtures shared by several test modules live in conftest.py.
"""
