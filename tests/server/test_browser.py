"""tests/server/test_browser.py — the chat page at / in a real browser (Debian's headless chromium through
chromedriver): type a message, wait for the streamed reply, check it against the API's answer to the same
conversation, send a second turn (the conversation is kept; its prefix comes from the cache), save a
screenshot. With --mmproj (test_image_page): attach a PNG through the file input, check the reply against the
API's answer to the same data URI and text, that the image's rows were in the prompt, that the image stays in
the conversation (the second turn reuses the cache, a reload shows it), that a bad image's 400 shows as an
error; without --mmproj the attach button is hidden.

Run: python test_browser.py GEMMA_BINARY MODEL [SCREENSHOT.png [MMPROJ IMAGES_DIR]]
"""
import base64
import os
import sys
import tempfile
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
        # a server without --mmproj: no attach button (GET /v1/models says meta.vision false)
        assert not d.find_element(By.ID, "attach").is_displayed()
        assert "images" not in d.find_element(By.ID, "model").text
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


ROWS = 4  # the tiny encoder's rows per image (tests/data/vision/mmproj-640.gguf)


def stats_tokens(d):
    """(prompt tokens, cached tokens) from the page's stats line."""
    stats = d.find_element(By.ID, "stats").text
    assert "prompt tokens" in stats, stats
    return int(stats.split(" prompt tokens")[0]), int(stats.split("(")[1].split(" cached")[0])


# a File made from a data URI, dropped on <main> or pasted into the message box as the browser would
DROP_OR_PASTE = """
const [how, uri] = arguments;
const bin = atob(uri.split(",")[1]), bytes = new Uint8Array(bin.length);
for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
const dt = new DataTransfer();
dt.items.add(new File([bytes], "picture.png", {type: "image/png"}));
if (how === "drop") {
  document.querySelector("main").dispatchEvent(new DragEvent("dragover", {dataTransfer: dt, bubbles: true, cancelable: true}));
  document.querySelector("main").dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
} else {
  document.getElementById("input").dispatchEvent(new ClipboardEvent("paste", {clipboardData: dt, bubbles: true, cancelable: true}));
}
"""


def attach(d, path, n_pending):
    d.find_element(By.ID, "file").send_keys(path)
    wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, "#pending img")) == n_pending, 10, "the thumbnail")


def test_image_page(env):
    if not env.get("mmproj"):
        print("     skip: no MMPROJ argument")
        return
    png_path = os.path.abspath(os.path.join(env["images"], "rgba.png"))
    with open(png_path, "rb") as f:
        uri = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    with Server(env["bin"], "--quiet", "--mmproj", env["mmproj"], model=env["model"], parallel=2) as s, \
            tempfile.TemporaryDirectory() as tmp:
        d = browser()
        try:
            d.get(s.base + "/")
            wait_for(lambda: d.find_element(By.ID, "model").text, 30, "the model name")
            assert "images" in d.find_element(By.ID, "model").text
            wait_for(lambda: d.find_element(By.ID, "attach").is_displayed(), 10, "the attach button")
            set_field(d, "temperature", 0)
            set_field(d, "max_tokens", 24)
            set_field(d, "system", SYSTEM)  # fills a 64-token KV block, so the second turn has a cached prefix
            # attach, remove, attach again: the composer shows what goes with the next message
            attach(d, png_path, 1)
            d.find_element(By.CSS_SELECTOR, "#pending .thumb button").click()
            wait_for(lambda: not d.find_elements(By.CSS_SELECTOR, "#pending img"), 10, "the thumbnail to go")
            attach(d, png_path, 1)
            # the page's data URI is the file's bytes
            assert d.find_element(By.CSS_SELECTOR, "#pending img").get_attribute("src") == uri
            first = "What is in this image?"
            reply = send_message(d, first, 0)
            assert not d.find_elements(By.CSS_SELECTOR, "#pending img"), "the composer is emptied on send"
            user = d.find_elements(By.CSS_SELECTOR, ".msg.user")[0]
            assert user.find_element(By.CSS_SELECTOR, ".imgs img").get_attribute("src") == uri
            assert user.find_element(By.CSS_SELECTOR, ".text").text == first
            turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}},
                                                  {"type": "text", "text": first}]}]
            st, want = s.post("/v1/chat/completions", {"messages": turn1, "temperature": 0, "top_p": 0.95, "max_tokens": 24})
            assert st == 200, want
            assert reply.strip() == want["choices"][0]["message"]["content"].strip(), (reply, want)
            # the page's request carried the image: its prompt is the API's, the image's rows and markers more
            # than the text alone
            prompt, _ = stats_tokens(d)
            assert prompt == want["usage"]["prompt_tokens"], (prompt, want["usage"])
            st, text_only = s.post("/v1/chat/completions", {"messages": [turn1[0], {"role": "user", "content": first}],
                                                            "temperature": 0, "max_tokens": 1})
            assert prompt >= text_only["usage"]["prompt_tokens"] + ROWS + 2, (prompt, text_only["usage"])
            # a second turn resends the image (the conversation keeps it) and reuses the cache
            second = "Describe its colours."
            reply2 = send_message(d, second, 1)
            turn2 = turn1 + [{"role": "assistant", "content": want["choices"][0]["message"]["content"]},
                             {"role": "user", "content": second}]
            st, want2 = s.post("/v1/chat/completions", {"messages": turn2, "temperature": 0, "top_p": 0.95, "max_tokens": 24})
            assert st == 200, want2
            assert reply2.strip() == want2["choices"][0]["message"]["content"].strip(), (reply2, want2)
            prompt2, cached2 = stats_tokens(d)
            assert prompt2 == want2["usage"]["prompt_tokens"], (prompt2, want2["usage"])
            assert cached2 > 0, "the second turn reuses the first (image included) from the cache"
            # a bad image: the server's 400 shows as an error, and the conversation goes on without it
            bad = os.path.join(tmp, "broken.png")
            with open(bad, "wb") as f:
                f.write(base64.b64decode(uri.split(",", 1)[1])[:60])
            attach(d, bad, 1)
            box = d.find_element(By.ID, "input")
            box.send_keys("And this one?")
            box.send_keys(Keys.ENTER)
            wait_for(lambda: d.find_elements(By.CSS_SELECTOR, ".msg.error[data-done='1']"), 60, "the error")
            err = d.find_elements(By.CSS_SELECTOR, ".msg.error")
            assert len(err) == 1 and "Error: image:" in err[0].text, [e.text for e in err]
            # two images in one message, after the failed turn: one dropped on the page, one pasted into the box
            for how in ("drop", "paste"):
                d.execute_script(DROP_OR_PASTE, how, uri)
                wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, "#pending img")) == (1 if how == "drop" else 2), 10,
                         "the " + how + "ped image")
            send_message(d, "Compare them.", 2)
            assert len(d.find_elements(By.CSS_SELECTOR, ".msg.error")) == 1
            prompt3, cached3 = stats_tokens(d)
            assert cached3 > 0 and prompt3 >= prompt2 + 2 * (ROWS + 2), (prompt3, cached3, prompt2)
            assert len(d.find_elements(By.CSS_SELECTOR, ".msg.user")[-1].find_elements(By.CSS_SELECTOR, ".imgs img")) == 2
            shot = os.path.splitext(env["shot"])[0] + "-image.png"
            d.save_screenshot(shot)
            print("     screenshot:", shot)
            # the conversation survives a reload, images included (the failed turn is not kept)
            d.refresh()
            wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 3, 10, "the kept conversation")
            assert len(d.find_elements(By.CSS_SELECTOR, ".msg.user .imgs img")) == 3
        finally:
            d.quit()


def main():
    binary, model = binary_and_model()
    shot = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.getcwd(), "chat-page.png")
    mmproj, images = (sys.argv[4], sys.argv[5]) if len(sys.argv) > 5 else (None, None)
    env = {"bin": binary, "model": model, "shot": shot, "mmproj": mmproj, "images": images}
    with Server(binary, "--quiet", model=model, parallel=2) as srv:
        env["srv"] = srv
        return run_tests([test_chat_page, test_image_page], env)


if __name__ == "__main__":
    raise SystemExit(main())
