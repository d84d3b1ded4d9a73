"""A minimal Chrome DevTools Protocol client over --remote-debugging-pipe (standard library only).

Chromium started with --remote-debugging-pipe reads protocol messages from file descriptor 3 and
writes its replies and events to file descriptor 4; each message is one JSON object followed by a
NUL byte. No websocket and no port: nothing else on the machine can talk to the browser.
"""
import base64
import json
import os
import select
import subprocess
import tempfile
import time


class CdpError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page, and every event the page produced."""

    def __init__(self, chromium, width=1280, height=2000, timeout=120.0):
        self.timeout = timeout
        self.events = []
        self._next_id = 0
        self._buffer = b""
        self._profile = tempfile.TemporaryDirectory(prefix="lowbit-report-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        args = [
            chromium, "--headless", "--remote-debugging-pipe", "--disable-gpu",
            "--user-data-dir=" + self._profile.name, "--no-first-run", "--no-default-browser-check",
            "--disable-extensions", "--disable-background-networking", "--disable-sync",
            "--disable-component-update", "--mute-audio", "--hide-scrollbars",
            "--window-size=%d,%d" % (width, height), "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium's sandbox refuses to run as root

        def map_fds():
            # Through spare numbers first: either pipe end may itself be 3 or 4.
            high_r, high_w = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        # 3 and 4 are kept open in the child (the mapping runs before close_fds).
        self._process = subprocess.Popen(args, pass_fds=(3, 4, to_browser_r, from_browser_w),
                                         preexec_fn=map_fds, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                 flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(domain + ".enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def close(self):
        try:
            self._process.terminate()
            self._process.wait(timeout=20)
        except Exception:
            self._process.kill()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self._profile.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read_message(self, deadline):
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError("no reply from Chromium within %.0f s" % self.timeout)
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise CdpError("Chromium closed the DevTools pipe (it exited)")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, session=False, **params):
        """Sends one command and returns its result; events read meanwhile are kept."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CdpError("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for_event(self, method):
        deadline = time.monotonic() + self.timeout
        while not any(e["method"] == method for e in self.events):
            reply = self._read_message(deadline)
            if "method" in reply:
                self.events.append(reply)

    def load(self, url):
        """Navigates and waits for the load event, then lets pending work (late errors) settle."""
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        self.wait_for_event("Page.loadEventFired")
        self.evaluate("new Promise(r => requestAnimationFrame(() => setTimeout(r, 100)))")

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise CdpError("evaluating the probe failed: %s" % result["exceptionDetails"])
        return result["result"].get("value")

    def screenshot(self, full_page=False):
        params = {"format": "png"}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth,"
                                 " document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1})
        return base64.b64decode(self.call("Page.captureScreenshot", session=True, **params)["data"])

    def problems(self):
        """Everything a clean page must not produce: exceptions, console errors and warnings,
        log entries at warning level or above (CSP violations, failed loads), and requests for
        anything but the page itself and data: URLs."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                text = details.get("exception", {}).get("description") or details.get("text")
                found.append("uncaught exception: %s" % text)
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "warning", "assert"):
                args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
                found.append("console.%s: %s" % (params["type"], args))
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                entry = params["entry"]
                found.append("%s %s: %s" % (entry["source"], entry["level"], entry["text"]))
            elif method == "Network.requestWillBeSent":
                url = params["request"]["url"]
                if not (url.startswith("file://") or url.startswith("data:")):
                    found.append("network request: %s" % url)
            elif method == "Network.loadingFailed":
                found.append("failed to load: %s" % params.get("errorText"))
        return found
