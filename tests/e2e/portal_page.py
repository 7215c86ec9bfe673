"""A page object for the consumer portal, driven by Selenium in headless Chromium.

Only stable hooks are used: element ids and ``data-testid`` attributes from
``tidings/portal/static/index.html`` and the rows ``portal.js`` builds.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SESSION_KEY = "tidings.portal.session"
ENDED_MESSAGE = "This portal link has expired or was already used. Ask for a new link."
WAIT_S = 15.0

# Runs before any script of every page (through the DevTools protocol, so the page's policy does
# not apply to it): records every Content-Security-Policy violation the page causes.
CSP_RECORDER = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI + " " + e.sourceFile);
});
"""

T = TypeVar("T")


def start_chromium(width: int = 1280, height: int = 900) -> webdriver.Chrome:
    """Headless Debian Chromium with its own chromedriver; never a downloaded browser."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        raise AssertionError(
            f"the portal's browser tests need Debian's chromium and chromedriver, missing: "
            f"{', '.join(missing)}. `make test` installs them (apt-get install chromium "
            f"chromium-driver)."
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Both paths are given, so selenium-manager never looks for (or downloads) anything.
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    driver = webdriver.Chrome(options=options, service=service)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": CSP_RECORDER})
    return driver


class PortalPage:
    def __init__(self, driver: webdriver.Chrome, api_url: str, screenshots: Path) -> None:
        self.driver = driver
        self.api_url = api_url.rstrip("/")
        self.screenshots = screenshots
        self.console: list[dict[str, Any]] = []

    # -- navigation ---------------------------------------------------------------------------

    def open(self, link_url: str, *, fresh: bool = True) -> None:
        """Opens a portal link; ``fresh`` first forgets this tab's stored session."""
        if fresh:
            self.forget_session()
        self.driver.get("about:blank")
        self.driver.get(link_url)
        self.wait_settled()

    def forget_session(self) -> None:
        if self.driver.current_url.startswith(self.api_url):
            self.driver.execute_script("window.sessionStorage.clear();")

    def reload(self) -> None:
        self.driver.refresh()
        self.wait_settled()

    def wait_settled(self) -> None:
        """Until the portal shows either its main view or its full-page message."""
        self.wait(
            lambda: self.shown("main") or self.shown("ended"),
            "the portal to open or refuse",
        )

    # -- finding ------------------------------------------------------------------------------

    def by_id(self, element_id: str) -> WebElement:
        return self.driver.find_element(By.ID, element_id)

    def by_testid(self, testid: str, within: WebElement | None = None) -> WebElement:
        root: Any = within if within is not None else self.driver
        found: WebElement = root.find_element(By.CSS_SELECTOR, f'[data-testid="{testid}"]')
        return found

    def all_by_testid(self, testid: str, within: WebElement | None = None) -> list[WebElement]:
        root: Any = within if within is not None else self.driver
        return list(root.find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"]'))

    def shown(self, element_id: str) -> bool:
        found = self.driver.find_elements(By.ID, element_id)
        return bool(found) and found[0].is_displayed()

    def text(self, element_id: str) -> str:
        return str(self.by_id(element_id).text)

    def wait(self, condition: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
        """Polls ``condition`` until it gives something truthy, and gives that."""

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                found = condition()
            except (StaleElementReferenceException, WebDriverException):
                found = None
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s:.0f}s waiting for {what}; status line: "
                    f"{self.status()!r}; page text:\n{self.body_text()[:2000]}"
                )
            time.sleep(0.1)

    def wait_status(self, expected: str, timeout_s: float = WAIT_S) -> str:
        return self.wait(
            lambda: self.status() if expected in self.status() else "",
            f"the status line to say {expected!r}",
            timeout_s,
        )

    def status(self) -> str:
        try:
            return str(self.by_id("status").text)
        except WebDriverException:
            return ""

    def body_text(self) -> str:
        try:
            return str(self.driver.find_element(By.TAG_NAME, "body").text)
        except WebDriverException:
            return ""

    # -- acting -------------------------------------------------------------------------------

    def click(self, element_id: str) -> None:
        element = self.wait(
            lambda: self.by_id(element_id) if self.shown(element_id) else None,
            f"#{element_id} to be shown",
        )
        assert element is not None
        element.click()

    def fill(self, element_id: str, value: str) -> None:
        field = self.by_id(element_id)
        field.clear()
        field.send_keys(value)

    def set_value(self, element_id: str, value: str) -> None:
        """Sets an input's value as a user's typing would end (for datetime-local inputs)."""
        self.driver.execute_script(
            "const el = document.getElementById(arguments[0]); el.value = arguments[1];"
            " el.dispatchEvent(new Event('input', {bubbles: true}));"
            " el.dispatchEvent(new Event('change', {bubbles: true}));",
            element_id,
            value,
        )

    def tab(self, name: str) -> None:
        self.click(f"tab-{name}")
        self.wait(lambda: self.shown(f"panel-{name}"), f"the {name} panel")

    # -- the session and the API, from the page's own context ----------------------------------

    def session(self) -> dict[str, Any] | None:
        stored = self.driver.execute_script(
            "return window.sessionStorage.getItem(arguments[0]);", SESSION_KEY
        )
        return None if stored is None else dict(json.loads(stored))

    def session_token(self) -> str:
        session = self.session()
        assert session is not None, "no session stored"
        return str(session["token"])

    def fetch(
        self, method: str, path: str, *, token: str | None = None, body: Any = None
    ) -> tuple[int, Any]:
        """A request from the page (its origin, its relative URLs), answered (status, JSON)."""
        answer = self.driver.execute_async_script(
            """
            const [method, path, token, body, done] = arguments;
            const init = {method, headers: {Authorization: "Bearer " + token}, credentials: "omit"};
            if (body !== null) {
              init.headers["Content-Type"] = "application/json";
              init.body = JSON.stringify(body);
            }
            fetch(path, init)
              .then(async (r) => done([r.status, await r.text()]))
              .catch((e) => done([0, String(e)]));
            """,
            method,
            path,
            token if token is not None else self.session_token(),
            body,
        )
        status, text = int(answer[0]), str(answer[1])
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    # -- checks -------------------------------------------------------------------------------

    def visible_secrets(self) -> list[str]:
        """Every signing secret the page shows: in its text or in a field shown."""
        found = self.driver.execute_script(
            """
            const shown = [];
            if (document.body.innerText.includes("whsec_")) shown.push("page text");
            for (const input of document.querySelectorAll("input, textarea")) {
              if (input.value.includes("whsec_") && input.offsetParent !== null) {
                shown.push("#" + input.id);
              }
            }
            return shown;
            """
        )
        return [str(item) for item in found]

    def csp_violations(self) -> list[str]:
        """Violations recorded by the page's listener, and those the console reported since
        the last call (the console's also from pages left meanwhile)."""
        recorded = self.driver.execute_script("return window.__cspViolations || [];") or []
        self.collect_console()
        logged = [
            str(entry.get("message", ""))
            for entry in self.console
            if "Content Security Policy" in str(entry.get("message", ""))
        ]
        self.console.clear()
        return [str(item) for item in recorded] + logged

    def collect_console(self) -> None:
        with contextlib.suppress(WebDriverException):
            self.console.extend(self.driver.get_log("browser"))

    def no_horizontal_overflow(self) -> tuple[int, int]:
        widths = self.driver.execute_script(
            "return [document.documentElement.scrollWidth, window.innerWidth];"
        )
        return int(widths[0]), int(widths[1])

    # -- screenshots --------------------------------------------------------------------------

    def screenshot(self, name: str, *, publish_to: Path | None = None) -> Path:
        """Saves the viewport as ``<screenshots>/portal-<name>.png`` (and copies it to
        ``publish_to``), after checking that no signing secret is visible."""
        secrets = self.visible_secrets()
        assert not secrets, f"a signing secret would be in the {name} screenshot: {secrets}"
        # Let fonts and layout settle, and take the focus ring off the last button pressed.
        self.driver.execute_script(
            "if (document.activeElement && document.activeElement.blur)"
            " document.activeElement.blur();"
        )
        time.sleep(0.2)
        self.screenshots.mkdir(parents=True, exist_ok=True)
        path = self.screenshots / f"portal-{name}.png"
        assert self.driver.save_screenshot(str(path)), f"no screenshot of {name}"
        if publish_to is not None:
            publish_to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, publish_to)
        return path
