"""Reference forward pass in numpy for the transformer architectures mnemo runs.

Reads a GGUF file with the `gguf` package (weights dequantized by gguf.quants, an implementation
independent of mnemo's), runs one sequence of tokens through the model in float64 and returns the
logits of every position. Slow and simple on purpose: it is the independent twin the C++ forward
pass is tested against (tiny synthetic models in tests, and spot checks on real ones).

Architectures: llama, qwen2 (q/k/v biases), qwen3 (per-head q/k RMSNorm), gemma3 (embedding
scale, q/k norm, post norms, GELU-tanh gate, interleaved sliding-window layers with their own RoPE
base). Formulas: RMSNorm (Zhang & Sennrich 2019), RoPE (Su et al. 2021; "norm" rotates adjacent
pairs, "neox" rotates halves), GQA attention (Ainslie et al. 2023), SwiGLU / GeGLU (Shazeer 2020).

Usage: python forward.py MODEL.gguf TOKEN_ID... -> prints JSON {"logits": [[...], ...]}
"""
import json
import math
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class Weights:
    def __init__(self, path):
        self.reader = GGUFReader(path)
        self.fields = self.reader.fields
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.arch = self.str_field("general.architecture")

    def str_field(self, key):
        f = self.fields[key]
        return bytes(f.parts[f.data[0]]).decode()

    def num(self, suffix, default=None):
        key = f"{self.arch}.{suffix}"
        if key not in self.fields:
            return default
        f = self.fields[key]
        return f.parts[f.data[0]][0].item()

    def has(self, name):
        return name in self.tensors

    def get(self, name):
        """The tensor as float64 [ne1, ne0] (rows of the GGUF row length), or [ne0] for vectors."""
        t = self.tensors[name]
        x = dequantize(t.data, t.tensor_type).astype(np.float64)
        shape = [int(d) for d in t.shape]
        if len(shape) == 1:
            return x.reshape(shape[0])
        return x.reshape(-1, shape[0])


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, base, rope_dim, neox, freq_scale=1.0):
    """x: [n_tokens, n_heads, head_dim]; rotates the first rope_dim dims of each head."""
    out = x.copy()
    half = rope_dim // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / rope_dim)
    theta = np.asarray(pos, dtype=np.float64)[:, None] * freq_scale * inv[None, :]  # [T, half]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    if neox:
        a, b = x[..., :half], x[..., half:rope_dim]
        out[..., :half] = a * cos - b * sin
        out[..., half:rope_dim] = a * sin + b * cos
    else:
        a, b = x[..., 0:rope_dim:2], x[..., 1:rope_dim:2]
        out[..., 0:rope_dim:2] = a * cos - b * sin
        out[..., 1:rope_dim:2] = a * sin + b * cos
    return out


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(path, tokens):
    w = Weights(path)
    arch = w.arch
    n_embd = w.num("embedding_length")
    n_layer = w.num("block_count")
    n_head = w.num("attention.head_count")
    n_head_kv = w.num("attention.head_count_kv", n_head)
    hd_k = w.num("attention.key_length", n_embd // n_head)
    hd_v = w.num("attention.value_length", hd_k)
    eps = w.num("attention.layer_norm_rms_epsilon", 1e-5)
    base = w.num("rope.freq_base", 10000.0)
    rope_dim = w.num("rope.dimension_count", hd_k)
    scaling = w.num("rope.scaling.factor", 0.0) or 0.0
    freq_scale = 1.0 / scaling if scaling > 0 else 1.0
    neox = arch in ("qwen2", "qwen3", "gemma3")
    gemma = arch == "gemma3"
    n_swa = w.num("attention.sliding_window", 0) if gemma else 0

    T = len(tokens)
    pos = np.arange(T)
    x = w.get("token_embd.weight")[tokens]  # [T, n_embd]
    if gemma:
        x = x * math.sqrt(n_embd)
    group = n_head // n_head_kv
    for il in range(n_layer):
        p = f"blk.{il}."
        swa_layer = gemma and n_swa > 0 and (il % 6) != 5
        h = rms_norm(x, w.get(p + "attn_norm.weight"), eps)
        q = h @ w.get(p + "attn_q.weight").T
        k = h @ w.get(p + "attn_k.weight").T
        v = h @ w.get(p + "attn_v.weight").T
        if w.has(p + "attn_q.bias"):
            q = q + w.get(p + "attn_q.bias")
            k = k + w.get(p + "attn_k.bias")
            v = v + w.get(p + "attn_v.bias")
        q = q.reshape(T, n_head, hd_k)
        k = k.reshape(T, n_head_kv, hd_k)
        v = v.reshape(T, n_head_kv, hd_v)
        if w.has(p + "attn_q_norm.weight"):
            q = rms_norm(q, w.get(p + "attn_q_norm.weight"), eps)
            k = rms_norm(k, w.get(p + "attn_k_norm.weight"), eps)
        layer_base = 10000.0 if swa_layer else base
        q = rope(q, pos, layer_base, rope_dim, neox, freq_scale)
        k = rope(k, pos, layer_base, rope_dim, neox, freq_scale)
        scale = 1.0 / math.sqrt(hd_k)
        out = np.zeros((T, n_head, hd_v))
        mask = np.tril(np.ones((T, T), dtype=bool))
        if swa_layer:
            mask &= (pos[:, None] - pos[None, :]) < n_swa
        for hq in range(n_head):
            hk = hq // group
            s = (q[:, hq, :] @ k[:, hk, :].T) * scale
            s = np.where(mask, s, -np.inf)
            s = s - s.max(axis=1, keepdims=True)
            pr = np.exp(s)
            pr /= pr.sum(axis=1, keepdims=True)
            out[:, hq, :] = pr @ v[:, hk, :]
        o = out.reshape(T, n_head * hd_v) @ w.get(p + "attn_output.weight").T
        if gemma:
            o = rms_norm(o, w.get(p + "post_attention_norm.weight"), eps)
        x = x + o
        h = rms_norm(x, w.get(p + "ffn_norm.weight"), eps)
        g = h @ w.get(p + "ffn_gate.weight").T
        u = h @ w.get(p + "ffn_up.weight").T
        a = (gelu_tanh(g) if gemma else silu(g)) * u
        f = a @ w.get(p + "ffn_down.weight").T
        if gemma:
            f = rms_norm(f, w.get(p + "post_ffw_norm.weight"), eps)
        x = x + f
    x = rms_norm(x, w.get("output_norm.weight"), eps)
    out_w = w.get("output.weight") if w.has("output.weight") else w.get("token_embd.weight")
    return x @ out_w.T  # [T, n_vocab]


def main(argv):
    path, tokens = argv[0], [int(t) for t in argv[1:]]
    logits = forward(path, tokens)
    json.dump({"logits": logits.tolist()}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
