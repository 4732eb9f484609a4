#!/usr/bin/python3
"""The operator console in a real browser (chromium headless through chromium-driver).

Run by scripts/console-browser.sh, which starts `herald serve` with its sandbox and sets:
CONSOLE_URL, ADMIN_TOKEN, UPLOADS (the .p8 files to upload), SHOTS (where screenshots go),
SANDBOX_PORT, TENANTS_DIR, DEVICE (a device token the sandbox accepts).

The break-glass admin token logs in first and makes two admin accounts through the admin API:
a viewer, who can read but change nothing, and an operator, who onboards, tests, rotates,
changes, cancels and deletes; the audit log then shows the operator's changes under its name.

Every step waits on a condition (bounded), never on time; a failed step saves a screenshot
named after it and the test exits 1.
"""
import json
import os
import sys
import traceback
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

BASE = os.environ["CONSOLE_URL"]
TOKEN = os.environ["ADMIN_TOKEN"]
UPLOADS = os.environ["UPLOADS"]
SHOTS = os.environ["SHOTS"]
SANDBOX = "https://localhost:%s" % os.environ["SANDBOX_PORT"]
TENANTS_DIR = os.environ["TENANTS_DIR"]
DEVICE = os.environ["DEVICE"]
CA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "config", "sandbox", "demo-ca.pem")
TENANT = "browser-shop"
WAIT = 60  # seconds, generous: a loaded 2-core machine


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,1100", "--user-data-dir=%s/chromium-profile" % UPLOADS):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


class Console:
    def __init__(self, driver):
        self.driver = driver
        self.step = "start"

    def shot(self, name):
        path = os.path.join(SHOTS, "%s.png" % name)
        # The whole page, from its top: as tall as its content.
        self.driver.execute_script("window.scrollTo(0, 0)")
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(1280, max(700, min(int(height) + 160, 4000)))
        self.driver.save_screenshot(path)
        print("   screenshot", path)

    def wait_for(self, by, value):
        return WebDriverWait(self.driver, WAIT).until(EC.presence_of_element_located((by, value)))

    def wait_text(self, by, value, text):
        WebDriverWait(self.driver, WAIT).until(EC.text_to_be_present_in_element((by, value), text))
        return self.driver.find_element(by, value).text

    def go(self, path):
        self.driver.get(BASE + path)

    def fill(self, element_id, value):
        field = self.driver.find_element(By.ID, element_id)
        field.clear()
        field.send_keys(value)

    def run(self, name, body):
        self.step = name
        print("== " + name)
        body()


def main():
    os.makedirs(SHOTS, exist_ok=True)
    driver = browser()
    console = Console(driver)
    try:
        steps(console)
    except Exception:
        traceback.print_exc()
        try:
            console.shot("failed-" + console.step)
            print("-- page at failure:", driver.current_url)
            print(driver.page_source[:4000])
        except Exception:
            pass
        driver.quit()
        print("FAILED at step: " + console.step)
        return 1
    driver.quit()
    print("PASSED: every console step")
    return 0


VIEWER = ("vera", "viewer passphrase for the browser test")
OPERATOR = ("otto", "operator passphrase for the browser test")


def admin(method, path, body=None):
    """The admin API with the break-glass token: (status, JSON answer or None)."""
    request = urllib.request.Request(
        BASE + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        text = response.read()
        return response.status, (json.loads(text) if text else None)


def steps(c):
    d = c.driver
    onboarded = {}

    def wrong_token():
        c.go("/console/tenants")
        c.wait_for(By.ID, "token")  # no session: the login page
        c.fill("token", TOKEN + "-wrong")
        d.find_element(By.ID, "login").click()
        c.wait_text(By.ID, "error", "The admin token is wrong")
        c.shot("01-login-refused")
        c.go("/console/tenants")
        c.wait_for(By.ID, "token")
        assert "/console/login" in d.current_url, d.current_url
        assert not d.find_elements(By.ID, "tenants"), "the tenants page showed without a login"

    def login():
        c.go("/console/login")
        c.wait_for(By.ID, "token")
        c.shot("02-login")
        c.fill("token", TOKEN)
        d.find_element(By.ID, "login").click()
        c.wait_for(By.ID, "tenants")
        c.wait_text(By.ID, "tenants", "demo-token")
        cookie = d.get_cookie("herald_console")
        assert cookie and cookie.get("httpOnly") and cookie.get("sameSite") == "Strict", cookie
        c.shot("03-tenants")

    def accounts():
        for (name, password), role in ((VIEWER, "viewer"), (OPERATOR, "operator")):
            status, _ = admin("POST", "/admin/accounts", {"name": name, "role": role})
            assert status == 201, status
            status, _ = admin("PUT", "/admin/accounts/%s/password" % name, {"password": password})
            assert status == 204, status

    def log_out():
        d.find_element(By.ID, "logout").click()
        c.wait_for(By.ID, "token")

    def password_login(account):
        name, password = account
        c.go("/console/login")
        c.wait_for(By.ID, "account")
        c.fill("account", name)
        c.fill("password", password)
        d.find_element(By.ID, "login").click()
        c.wait_for(By.ID, "tenants")
        c.wait_text(By.ID, "who", name)

    def viewer():
        log_out()
        password_login(VIEWER)
        assert "viewer" in d.find_element(By.ID, "who").text
        assert not d.find_elements(By.XPATH, "//a[@href='/console/onboard']"), "a viewer is offered onboarding"
        c.shot("03a-viewer-tenants")
        c.go("/console/tenants/demo-token")
        c.wait_for(By.ID, "credential")
        for form in ("test-form", "api-key-form", "edit-form", "rotate-form", "delete-form", "channel-form", "broadcast-form"):
            assert not d.find_elements(By.ID, form), "a viewer sees " + form
        c.go("/console/onboard")
        c.wait_text(By.ID, "error", "admin:operate is required")
        c.shot("03b-viewer-refused")
        c.go("/console/audit")
        c.wait_text(By.ID, "audit", "account.create")
        c.shot("03c-viewer-audit")

    def operator():
        log_out()
        password_login(OPERATOR)
        assert "operator" in d.find_element(By.ID, "who").text

    def audited():
        c.go("/console/audit?tenant=" + TENANT)
        text = c.wait_text(By.ID, "audit", "tenant.create")
        rows = [row.text for row in d.find_elements(By.XPATH, "//table[@id='audit']/tbody/tr")]
        created = [row for row in rows if "tenant.create" in row]
        assert created and OPERATOR[0] in created[0], rows
        for action in ("credential.upload", "tenant.update", "job.cancel", "notification.test"):
            assert action in text, action + " is not in the audit log"
        status, page = admin("GET", "/admin/audit?tenant=%s&action=tenant.delete" % TENANT)
        assert status == 200 and page["entries"][0]["account"] == OPERATOR[0], page
        c.shot("12-audit-log")

    def onboard():
        c.go("/console/onboard")
        c.wait_for(By.ID, "onboard-form")
        c.fill("id", TENANT)
        c.fill("team_id", "DEMOTEAM01")
        c.fill("topics", "com.example.herald.demo")
        c.fill("development", SANDBOX)
        c.fill("production", SANDBOX)
        c.fill("key_id", "DEMOKEY001")
        d.find_element(By.ID, "key_file").send_keys(os.path.join(UPLOADS, "AuthKey_DEMOKEY001.p8"))
        c.fill("ca_file", os.path.abspath(CA_FILE))
        c.fill("key_name", "backend")
        c.shot("04-onboard-form")
        d.find_element(By.ID, "onboard").click()
        key = c.wait_for(By.ID, "new-key-value").text
        assert key.startswith("hk_"), key
        onboarded["key"] = key
        c.shot("05-onboarded-key-shown-once")
        assert os.path.exists(os.path.join(TENANTS_DIR, TENANT + ".yaml")), "no tenant file written"
        d.find_element(By.ID, "open-tenant").click()
        c.wait_for(By.ID, "test-form")
        assert "backend" in d.find_element(By.ID, "api-keys").text

    def send_test(shot):
        def body():
            c.go("/console/tenants/" + TENANT)
            c.wait_for(By.ID, "test-form")
            c.fill("device_token", DEVICE)
            d.find_element(By.ID, "send").click()
            status = c.wait_for(By.ID, "send-status").text
            assert status == "200", "APNs answered %s" % status
            c.shot(shot)
        return body

    def usage_chart():
        # The usage counts reach the store within the server's flush interval (10 s): reload until
        # the chart has the test sends.
        import time
        deadline = time.monotonic() + WAIT
        while True:
            c.go("/console/tenants/" + TENANT)
            canvas = c.wait_for(By.ID, "usage-chart")
            drawn = d.execute_script(
                "const chart = Chart.getChart(arguments[0]);"
                "return chart ? chart.data.datasets[0].data.reduce((a, b) => a + b, 0) : -1;", canvas)
            if drawn and drawn >= 1:
                break
            assert time.monotonic() < deadline, "the chart never showed the test send (%s)" % drawn
            time.sleep(1)
        assert "delivered" in d.find_element(By.ID, "usage-totals").text
        d.execute_script("arguments[0].scrollIntoView()", canvas)
        c.driver.save_screenshot(os.path.join(SHOTS, "06b-usage-chart.png"))
        print("   screenshot", os.path.join(SHOTS, "06b-usage-chart.png"))

    def rotate():
        c.go("/console/tenants/" + TENANT)
        c.wait_for(By.ID, "rotate-form")
        c.fill("rotate_key_id", "DEMOKEY002")
        d.find_element(By.ID, "rotate_key").send_keys(os.path.join(UPLOADS, "AuthKey_DEMOKEY002.p8"))
        d.find_element(By.ID, "revoke").click()
        d.find_element(By.ID, "rotate").click()
        c.wait_text(By.ID, "notice", "The credential was replaced")
        assert "DEMOKEY002" in d.find_element(By.ID, "credential").text
        c.shot("07-rotated")

    def change_settings():
        c.go("/console/tenants/" + TENANT)
        c.wait_for(By.ID, "edit-form")
        c.fill("edit_topics", "com.example.herald.demo\ncom.example.herald.demo.voip")
        c.fill("edit_connections", "3")
        d.find_element(By.ID, "save-settings").click()
        c.wait_text(By.ID, "notice", "validated, written and applied")
        assert "3 connection(s)" in d.page_source, "the pool setting did not apply"
        with open(os.path.join(TENANTS_DIR, TENANT + ".yaml")) as f:
            assert "com.example.herald.demo.voip" in f.read(), "the topic was not written"

    def api(method, path, body=None):
        request = urllib.request.Request(
            BASE + path, method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": "Bearer " + onboarded["key"], "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            return response.status, json.loads(response.read())

    def cancel_batch():
        tokens = ["%064x" % (0xbeef0000 + i) for i in range(100000)]
        status, accepted = api("POST", "/v1/notifications/batch", {
            "job_id": "browser-batch", "device_tokens": tokens,
            "notification": {"topic": "com.example.herald.demo", "aps": {"alert": "hi"}}})
        assert status == 202, accepted
        c.go("/console/tenants/" + TENANT)
        button = c.wait_for(By.XPATH, "//table[@id='jobs']//form[input[@name='job' and @value='browser-batch']]/button")
        row = d.find_element(By.XPATH, "//table[@id='jobs']//tr[td/code[text()='browser-batch']]").text
        assert "running" in row or "accepted" in row, row
        button.click()
        c.wait_text(By.ID, "notice", "Job browser-batch is cancelled")
        row = d.find_element(By.XPATH, "//table[@id='jobs']//tr[td/code[text()='browser-batch']]").text
        assert "cancelled" in row, row
        assert not d.find_elements(By.XPATH, "//table[@id='jobs']//input[@name='job' and @value='browser-batch']"), \
            "a cancelled job still has a cancel button"
        c.shot("09-job-cancelled")
        status, job = api("GET", "/v1/jobs/browser-batch")
        assert job["state"] == "cancelled" and job["counts"]["cancelled"] > 0, job

    def delete():
        c.go("/console/tenants/" + TENANT)
        c.wait_for(By.ID, "delete-form")
        c.fill("confirm", TENANT)
        c.shot("10-tenant-page")
        d.find_element(By.ID, "delete").click()
        c.wait_text(By.ID, "notice", "deleted")
        assert TENANT not in d.find_element(By.ID, "tenants").text
        assert not os.path.exists(os.path.join(TENANTS_DIR, TENANT + ".yaml")), "the tenant file is still there"
        c.shot("11-deleted")

    def broadcast():
        # The demo token tenant's channels live on the sandbox's channel management port.
        c.go("/console/tenants/demo-token")
        c.wait_for(By.ID, "channel-form")
        c.fill("channel_label", "browser final")
        d.find_element(By.ID, "create-channel").click()
        c.wait_text(By.ID, "notice", "was created on APNs")
        c.wait_text(By.ID, "channel-list", "browser final")
        c.wait_text(By.ID, "channel-counts", "1 of 10000 channels")
        c.fill("content_state", '{"score": "2-1"}')
        d.find_element(By.ID, "send-broadcast").click()
        status = c.wait_for(By.ID, "broadcast-status").text
        assert status == "200", "APNs answered the broadcast %s" % status
        c.shot("06c-broadcast-200")
        d.find_element(By.XPATH, "//table[@id='channel-list']//button").click()
        c.wait_text(By.ID, "notice", "was deleted on APNs")
        assert "browser final" not in d.find_element(By.ID, "channel-list").text

    def logout():
        c.go("/console/tenants")
        c.wait_for(By.ID, "tenants")
        d.find_element(By.ID, "logout").click()
        c.wait_for(By.ID, "token")
        c.go("/console/tenants")
        c.wait_for(By.ID, "token")
        assert "/console/login" in d.current_url

    c.run("wrong admin token stays out", wrong_token)
    c.run("log in", login)
    c.run("make a viewer and an operator account", accounts)
    c.run("a viewer reads but changes nothing", viewer)
    c.run("log in as the operator", operator)
    c.run("onboard a token tenant with a .p8", onboard)
    c.run("send a test notification", send_test("06-test-notification-200"))
    c.run("the usage chart shows it", usage_chart)
    c.run("a channel made, broadcast to and deleted", broadcast)
    c.run("rotate the key", rotate)
    c.run("send with the new key", send_test("08-test-notification-after-rotation"))
    c.run("change its settings", change_settings)
    c.run("cancel a running batch", cancel_batch)
    c.run("delete the tenant", delete)
    c.run("the audit log shows the operator's changes", audited)
    c.run("log out", logout)


if __name__ == "__main__":
    sys.exit(main())
