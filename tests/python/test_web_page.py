"""The web page at / in headless Chromium (Debian's chromium and chromium-driver, driven by
selenium): a message sent, the answer streamed in (equal to the API's answer to the same
conversation), the slot that served it shown with its cells, a requantization done from the
page and the new K/V type shown. A screenshot is kept in the build directory
(test-artifacts/web_page.png).
"""
import os
import shutil
from pathlib import Path

import pytest
import requests

from helpers.server import Server

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER),
                                reason="chromium / chromium-driver not installed (scripts/setup)")


@pytest.fixture(scope="module")
def srv(binary, smollm2_model, tmp_path_factory):
    s = Server(binary, smollm2_model, "-np", 2, "-c", 2048, "--temp", 0,
               "--slot-save-path", tmp_path_factory.mktemp("slots"))
    yield s
    assert s.alive(), "the server died:\n" + s.log()
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,800"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield d
    d.quit()


def test_chat_and_slots_from_the_page(srv, browser, build_dir):
    r = requests.get(srv.url + "/", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    assert "<title>mnemo</title>" in r.text
    browser.get(srv.url + "/")
    # The slot table is rebuilt when a slot changes: an element read across a rebuild is stale,
    # and the wait reads it again.
    wait = WebDriverWait(browser, 120, ignored_exceptions=[StaleElementReferenceException])
    wait.until(lambda d: d.find_element(By.ID, "model").text.endswith(".gguf"))

    # A message, answered by streaming: the text assembled from the stream is the API's answer.
    box = browser.find_element(By.ID, "prompt")
    box.send_keys("Name three colours.", Keys.ENTER)
    answer = wait.until(lambda d: d.find_element(By.ID, "answer-1")
                        if d.find_element(By.ID, "answer-1").get_attribute("data-done") else None)
    api = requests.post(srv.url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 256})
    want = api.json()["choices"][0]["message"]["content"]
    assert answer.text.strip() == want.strip() and want.strip(), (answer.text, want)
    assert "generated" in browser.find_element(By.ID, "status").text

    # The slot that served it holds the conversation's cells.
    slots = requests.get(srv.url + "/slots", timeout=10).json()
    used = max(slots, key=lambda s: s["n_tokens"])
    assert used["n_tokens"] > 0
    row = f"slot-{used['id']}"
    wait.until(lambda d: d.find_element(By.ID, row).find_elements(By.TAG_NAME, "td")[2]
               .text.startswith(f"{used['n_tokens']} /"))

    # Requantized from the page: the row shows the new type, and so does the API.
    def requantize(d):
        Select(d.find_element(By.ID, row).find_element(By.CLASS_NAME, "type")) \
            .select_by_value("q8_0")
        d.find_element(By.ID, row).find_element(By.CLASS_NAME, "requantize").click()
        return True

    wait.until(requantize)
    wait.until(lambda d: d.find_element(By.ID, row).find_element(By.CLASS_NAME, "types").text
               == "q8_0 / q8_0")
    slot = requests.get(srv.url + "/slots", timeout=10).json()[used["id"]]
    assert slot["type_k"] == "q8_0" and slot["type_v"] == "q8_0"
    assert browser.find_element(By.ID, "slot-error").text == ""

    out = Path(build_dir) / "test-artifacts"
    out.mkdir(exist_ok=True)
    shot = out / "web_page.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10000
