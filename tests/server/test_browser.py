"""tests/server/test_browser.py — the chat page at / in a real browser (Debian's headless chromium through
chromedriver): type a message, wait for the streamed reply, check it against the API's answer to the same
conversation, send a second turn (the conversation is kept; its prefix comes from the cache), save a
screenshot.

Run: python test_browser.py GEMMA_BINARY MODEL [SCREENSHOT.png]
"""
import os
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from srvtest import Server, binary_and_model, run_tests


def browser():
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,800"):
        opts.add_argument(a)
    opts.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def wait_for(pred, timeout, what):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def set_field(d, id_, value):
    el = d.find_element(By.ID, id_)
    el.clear()
    el.send_keys(str(value))
    d.execute_script("arguments[0].dispatchEvent(new Event('change'))", el)


def send_message(d, text, n_done):
    box = d.find_element(By.ID, "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
    wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done='1']")) > n_done, 300, "the reply")
    replies = d.find_elements(By.CSS_SELECTOR, ".msg.assistant .text")
    return replies[-1].text


# long enough to fill two 64-token KV blocks, so the second turn has a cached prefix to report
SYSTEM = ("You are a terse assistant for a travel agency. Answer in one short sentence. Never use lists. "
          "Prefer plain words. If a question is about a city, give its country too. If you do not know, say so. "
          "Do not invent facts, prices or opening hours. Keep a friendly tone and avoid exclamation marks. "
          "Dates are written as day month year. Distances are in kilometres, temperatures in degrees Celsius.")


def test_chat_page(env):
    s = env["srv"]
    d = browser()
    try:
        d.get(s.base + "/")
        assert "gemma.c" in d.title
        wait_for(lambda: d.find_element(By.ID, "model").text, 30, "the model name")
        set_field(d, "temperature", 0)
        set_field(d, "max_tokens", 24)
        set_field(d, "system", SYSTEM)
        first = "What is the capital of Italy?"
        reply = send_message(d, first, 0)
        want = s.post("/v1/chat/completions", {
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": first}],
            "temperature": 0, "top_p": 0.95, "max_tokens": 24})[1]["choices"][0]["message"]["content"]
        # the page shows text; the browser collapses nothing inside pre-wrap but trims the ends
        assert reply.strip() == want.strip(), (reply, want)
        stats = d.find_element(By.ID, "stats").text
        assert "prompt tokens" in stats and "tokens/s" in stats, stats
        second = send_message(d, "And of France?", 1)
        assert d.find_elements(By.CSS_SELECTOR, ".msg.user")[1].text.endswith("And of France?")
        stats = d.find_element(By.ID, "stats").text
        cached = int(stats.split("(")[1].split(" cached")[0])
        assert cached > 0, "the second turn reuses the first from the cache: " + stats
        assert second is not None
        d.save_screenshot(env["shot"])
        print("     screenshot:", env["shot"])
        assert os.path.getsize(env["shot"]) > 10000
        # the conversation survives a reload (localStorage)
        d.refresh()
        wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 2, 10, "the kept conversation")
    finally:
        d.quit()


def main():
    binary, model = binary_and_model()
    shot = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.getcwd(), "chat-page.png")
    with Server(binary, "--quiet", model=model, parallel=2) as srv:
        return run_tests([test_chat_page], {"bin": binary, "model": model, "srv": srv, "shot": shot})


if __name__ == "__main__":
    raise SystemExit(main())
