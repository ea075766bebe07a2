"""The status page over TLS with a bearer token, in headless Chromium (run by
status_page_test.sh against a ClusterD serving its HTTP port over TLS).

The page asks for the token when the API answers 401, keeps it in the tab's
sessionStorage and sends it only as an Authorization header: never in a URL.
A wrong token is asked for again; a viewer's token loads the page.
"""
import argparse
import os

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from status_page_test import wait_for  # this script's directory is on sys.path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True, help="https://127.0.0.1:PORT/")
    ap.add_argument("--token-file", required=True, help="a viewer's bearer token")
    ap.add_argument("--artifacts", required=True)
    args = ap.parse_args()
    os.makedirs(args.artifacts, exist_ok=True)
    token = open(args.token_file).read().strip()

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    # The test CA is not in the browser's trust store (a person's browser would trust the
    # cluster's CA); the connection is still TLS.
    opts.accept_insecure_certs = True
    opts.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    js = driver.execute_script
    shot = lambda name: driver.save_screenshot(os.path.join(args.artifacts, name + ".png"))
    login_open = lambda: "open" in driver.find_element(By.ID, "login").get_attribute("class")
    try:
        driver.get(args.url)
        assert driver.current_url.startswith("https://"), driver.current_url
        wait_for("the token prompt (the API answered 401)", login_open)
        assert not js("return window.clusterdStatus.ready")
        shot("tls-1-token-prompt")

        # A wrong token: the API answers 401 again and the prompt comes back.
        box = driver.find_element(By.ID, "tokenInput")
        box.send_keys("not-a-token")
        driver.find_element(By.CSS_SELECTOR, "#loginForm button").click()
        wait_for("the prompt again after a wrong token", login_open)
        assert not js("return window.clusterdStatus.ready")

        box = driver.find_element(By.ID, "tokenInput")
        box.clear()
        box.send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "#loginForm button").click()
        wait_for("the page's first load with the viewer's token",
                 lambda: js("return !!window.clusterdStatus.ready"))
        assert not login_open()
        shot("tls-2-loaded")

        # Kept in this tab's sessionStorage, never in a URL the page asked for.
        assert js("return sessionStorage.getItem('clusterdToken')") == token
        assert js("return localStorage.length") == 0
        assert token not in driver.current_url
        urls = js("return performance.getEntriesByType('resource').map((e) => e.name)")
        assert urls and all(u.startswith("https://") for u in urls), urls
        assert not [u for u in urls if token in u], "the token is in a URL"
        # A reload in the same tab keeps the token (no prompt).
        driver.refresh()
        wait_for("the reloaded page, without a prompt", lambda: js("return !!window.clusterdStatus.ready"))
        assert not login_open()
        print(f"status page over TLS: token asked for, kept in sessionStorage, in no URL ({len(urls)} requests)")
    except Exception:
        shot("tls-failure")
        raise
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
