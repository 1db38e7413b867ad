// The operator console in a real browser: `codemode serve --http 127.0.0.1:0 --console` with an
// upstream MCP server of the official SDK (console_server.js), driven by the official MCP client
// (@modelcontextprotocol/sdk) over streamable HTTP and watched and operated in headless Chromium
// (Debian's `chromium`, driven by playwright-core over the DevTools protocol). Checks:
//   a) a wrong token keeps the login form and says so; the right one logs `ana` in;
//   b) a call parked for approval shows in the approvals view (tool, input, cell line); approving
//      it there lets the run complete, and its page shows who decided;
//   c) a denial with a reason reaches the cell as a catchable error carrying the reason;
//   d) a suspended run aborted from its page is `aborted`, and `wait` on it fails — a `wait` on a
//      settled (completed or aborted) run fails without rewriting the console's record of it;
//   g) hostile strings (markup, `javascript:` URLs, bidi and control characters, a tool named
//      `<img/src/onerror=alert(5)>`) are shown as text: no dialog, no extra script, no event-handler
//      attribute, no `javascript:` link, no raw bidi character, no CSP violation;
//   h) over plain HTTP: the CSP and other headers, the session cookie's flags, the Host/Origin
//      checks, CSRF, forged cookies, login failures and the login rate limit (last: it locks out);
//   i) a second operator, `bo`, whose token comes from the environment, decides a call in a second
//      browser context, and the run's page says `bo`; logging out ends the browser's session;
//   e) the upstream server SIGKILLed shows `failed`, then `connected` again, with its restarts;
//   f) the fleet view lists the one replica and charts cells from the live event stream.
// Screenshots of the views go to SCREENSHOT_DIR (the documentation's images).
//
// Usage: node tests/e2e/console.mjs CODEMODE_BIN WORKDIR SCREENSHOT_DIR
// Prints `ok: console in a real browser` last and exits 0; any failure throws (non-zero exit) naming
// what failed, with the tail of codemode's stderr. Everything started here (codemode serve and its
// process group, Chromium) is stopped whatever the outcome.
import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const [BIN, WORKDIR, SHOTS] = process.argv.slice(2);
if (!BIN || !WORKDIR || !SHOTS) {
  console.error("usage: node tests/e2e/console.mjs CODEMODE_BIN WORKDIR SCREENSHOT_DIR");
  process.exit(2);
}

const CHROMIUM = process.env.CODEMODE_E2E_CHROMIUM || "/usr/bin/chromium";
const ANA = { name: "ana", token: "ana-token-0123456789" };
const BO = { name: "bo", token: "bo-token-from-the-environment-0042" };
const INVOICE = "plugin:demo:demo_invoice_send";
const HOSTILE_NAME = "<img/src/onerror=alert(5)>"; // console_server.js's hostile tool
const TIMEOUT = 20_000; // default limit of one wait on the page or the server
const DESKTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };
// Characters the console must never show raw (the spec's list; \n and \t are allowed in blocks).
const UNSAFE_SOURCE = "[\\u0000-\\u0008\\u000B-\\u001F\\u007F-\\u009F\\u200E\\u200F\\u202A-\\u202E\\u2066-\\u2069\\u2028\\u2029]";
// U+202E made visible: `\u{202e}` (or `\u{202E}`, or a JSON `\u202e` inside a JSON block).
const VISIBLE_RLO = /\\u\{?0*202e\}?/i;
// U+0007 made visible: `\u{7}`, `\u{0007}`, or JSON's own `\u0007` inside a JSON block.
const VISIBLE_BEL = /\\u\{0*7\}|\\u0007/i;

// ---------------------------------------------------------------------------------------------
// Small helpers

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function show(value) {
  const s = typeof value === "string" ? JSON.stringify(value) : JSON.stringify(value);
  return s === undefined ? String(value) : s.length > 3000 ? `${s.slice(0, 3000)}…` : s;
}

function assert(cond, what, detail) {
  if (!cond) throw new Error(detail === undefined ? what : `${what}: ${show(detail)}`);
}

/** Polls `probe` until it returns a truthy value (returned) or `timeoutMs` passes (throws naming
 * `what` and, through `last()`, what was last seen). A probe that throws counts as "not yet",
 * unless what it throws is marked `fatal` (then it ends the wait at once). */
async function until(what, probe, { timeoutMs = TIMEOUT, everyMs = 100, last } = {}) {
  const deadline = Date.now() + timeoutMs;
  let error;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
      error = undefined;
    } catch (e) {
      if (e?.fatal) throw e;
      error = e;
    }
    if (Date.now() > deadline) {
      const seen = last ? `; last seen: ${show(await Promise.resolve().then(last).catch((e) => `(${e.message})`))}` : "";
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${seen}${error ? ` (${error.message})` : ""}`);
    }
    await sleep(everyMs);
  }
}

/** A CSS attribute selector `[name="value"]` for any value. */
const attr = (name, value) => `[${name}=${JSON.stringify(String(value))}]`;

// ---------------------------------------------------------------------------------------------
// codemode serve

class Serve {
  constructor(bin, config, env) {
    // Its own process group: codemode's stdio upstream servers are its children, in that group,
    // and the group is killed at the end whatever happened to codemode.
    this.child = spawn(bin, ["serve", "--config", config, "--http", "127.0.0.1:0", "--console", "--demo-tools"], {
      env,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.lines = [];
    this.stdout = "";
    this.exit = null;
    this.exited = new Promise((resolve) => this.child.on("exit", (code, signal) => resolve((this.exit = { code, signal }))));
    this.child.on("error", (e) => { this.exit = { error: e.message }; });
    readline.createInterface({ input: this.child.stderr }).on("line", (line) => this.lines.push(line));
    this.child.stdout.on("data", (d) => { this.stdout += d; });
  }

  get stderr() {
    return this.lines.join("\n");
  }

  tail(n = 200) {
    return this.lines.slice(-n).join("\n");
  }

  /** `http://ADDR` from `codemode: serving MCP at http://ADDR/mcp`. */
  async base() {
    const m = await until("codemode serve to report its address", () => {
      if (this.exit) throw Object.assign(new Error(`codemode serve exited before reporting its address: ${show(this.exit)}`), { fatal: true });
      for (const line of this.lines) {
        const found = /codemode: serving MCP at (http:\/\/\S+)\/mcp\b/.exec(line);
        if (found) return found;
      }
      return null;
    }, { timeoutMs: 60_000, everyMs: 50 });
    return m[1];
  }

  killGroup(signal) {
    try {
      process.kill(-this.child.pid, signal);
    } catch {
      // gone already
    }
  }

  /** SIGTERM (codemode shuts its upstream servers down), then SIGKILL to the whole group. */
  async stop() {
    if (!this.exit && this.child.pid) {
      try {
        process.kill(this.child.pid, "SIGTERM");
      } catch {
        // gone already
      }
      await Promise.race([this.exited, sleep(15_000)]);
    }
    this.killGroup("SIGKILL");
  }
}

// ---------------------------------------------------------------------------------------------
// State shared by the flows, and the cleanup that must run whatever happens

let serve;
let browser;
let mcp;
let base;
const problems = { dialogs: [], pageErrors: [], csp: [], serverErrors: [] };
const consoleErrors = [];

// A last resort if the process is ended some other way: never leave codemode's group behind.
process.on("exit", () => serve?.killGroup("SIGKILL"));
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, () => {
    console.error(`console.mjs: ${sig}, stopping`);
    process.exit(1);
  });
}

function upstreamPid() {
  try {
    return Number(fs.readFileSync(path.join(WORKDIR, "server.pid"), "utf8").trim()) || null;
  } catch {
    return null;
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Whether `pid` is (still) our console_server.js: the pid file may outlive the process. */
function isConsoleServer(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("console_server.js");
  } catch {
    return false;
  }
}

async function cleanup() {
  const errors = [];
  const step = async (what, fn) => {
    try {
      await Promise.race([fn(), sleep(20_000).then(() => { throw new Error("timed out"); })]);
    } catch (e) {
      errors.push(`${what}: ${e.message}`);
    }
  };
  if (mcp) await step("closing the MCP client", () => mcp.close());
  if (browser) await step("closing Chromium", () => browser.close());
  if (serve) await step("stopping codemode serve", () => serve.stop());
  // codemode's upstream server is in its group and gone with it; make sure.
  const pid = upstreamPid();
  if (pid && alive(pid) && isConsoleServer(pid)) {
    console.error(`console.mjs: the upstream server ${pid} outlived codemode serve; killing it`);
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
  return errors;
}

// ---------------------------------------------------------------------------------------------
// MCP: exec / wait through the official client

async function mcpCall(tool, args) {
  const res = await mcp.callTool({ name: tool, arguments: args }, undefined, { timeout: 60_000 });
  const out = res.structuredContent ?? JSON.parse(res.content?.[0]?.text ?? "null");
  assert(out && typeof out.status === "string", `MCP ${tool} returned no CodeModeResult`, res);
  return out;
}

const mcpExec = (code) => mcpCall("exec", { code });
const mcpWait = (runId) => mcpCall("wait", { runId });

/** `wait` until the run is no longer `waiting`; its final result. */
async function mcpSettle(first) {
  let out = first;
  const deadline = Date.now() + 60_000;
  while (out.status === "waiting") {
    assert(Date.now() < deadline, `run ${first.runId} did not settle`, out);
    out = await mcpWait(first.runId);
  }
  return out;
}

/** Runs `code`, which must park exactly one call for approval; its run and request ids. */
async function park(code) {
  const out = await mcpExec(code);
  assert(out.status === "waiting", "a gated call should leave the run waiting (parked)", out);
  const pending = (out.pendingToolCalls || []).filter((p) => p.kind === "approval");
  assert(pending.length === 1, "exactly one call should be parked for approval", out);
  assert(pending[0].toolId === INVOICE, "the parked call should be the gated invoice tool", out);
  return { runId: out.runId, requestId: pending[0].requestId, first: out };
}

// ---------------------------------------------------------------------------------------------
// The browser

function watch(page, label) {
  page.on("dialog", (d) => {
    problems.dialogs.push(`${label}: ${d.type()} ${d.message()}`);
    d.dismiss().catch(() => {});
  });
  page.on("pageerror", (e) => problems.pageErrors.push(`${label}: ${e.message}`));
  page.on("console", (m) => {
    const text = m.text();
    if (/Content[- ]Security[- ]Policy/i.test(text)) problems.csp.push(`${label}: ${text}`);
    if (m.type() === "error") consoleErrors.push(`${label}: ${text}`);
  });
  page.on("response", (r) => {
    if (r.status() >= 500) problems.serverErrors.push(`${label}: ${r.status()} ${r.request().method()} ${r.url()}`);
  });
}

/** No dialog, page error, CSP violation or 5xx so far. */
function checkProblems(where) {
  assert(problems.dialogs.length === 0, `a dialog fired (${where})`, problems.dialogs);
  assert(problems.pageErrors.length === 0, `the page threw (${where})`, problems.pageErrors);
  assert(problems.csp.length === 0, `a Content Security Policy violation was reported (${where})`, problems.csp);
  assert(problems.serverErrors.length === 0, `the console answered 5xx (${where})`, problems.serverErrors);
}

async function newPage(label) {
  const context = await browser.newContext({ viewport: DESKTOP });
  context.setDefaultTimeout(TIMEOUT);
  const page = await context.newPage();
  watch(page, label);
  return { context, page };
}

/** The text of the first element matching `sel`, or null. */
const textOf = (page, sel) =>
  page.evaluate((s) => {
    const el = document.querySelector(s);
    return el ? el.textContent : null;
  }, sel);

/** Waits until the text of `sel` is `want` (trimmed), matches the RegExp `want`, or passes `want(text)`. */
async function waitText(page, sel, want, timeoutMs = TIMEOUT) {
  const ok = typeof want === "string" ? (t) => t.trim() === want : want instanceof RegExp ? (t) => want.test(t) : want;
  return until(`${sel} to read ${want instanceof Function ? "as expected" : want}`, async () => {
    const t = await textOf(page, sel);
    return t !== null && ok(t) ? t : null;
  }, { timeoutMs, last: () => textOf(page, sel) });
}

/** Follows the header's navigation link to a view (`runs`, `approvals`, `servers`, `fleet`). */
async function nav(page, view) {
  await page.locator(`nav a[href="#/${view}"]`).click();
}

/** Shows a view of the single-page app (its hash route). */
async function route(page, hash) {
  await page.evaluate((h) => { location.hash = h; }, hash);
}

async function login(page, who) {
  await page.locator("form#login input[name=name]").fill(who.name);
  await page.locator("form#login input[name=token]").fill(who.token);
  await page.locator("form#login button[type=submit]").click();
}

/** The console's record of a run, read with the page's session. */
const runRecord = (page, runId) => page.evaluate((id) => fetch(`/console/api/runs/${encodeURIComponent(id)}`).then((r) => r.json()), runId);

/** Clicks `locator` and waits for the POST it makes to a path under `prefix`; asserts its status. */
async function clickPosting(page, locator, prefix, status = 204) {
  const [res] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === "POST" && new URL(r.url()).pathname.startsWith(prefix)),
    locator.click(),
  ]);
  assert(res.status() === status, `POST ${new URL(res.url()).pathname} should answer ${status}`, { status: res.status(), body: await res.text().catch(() => "") });
}

async function screenshot(page, name, viewport = DESKTOP) {
  await page.setViewportSize(viewport);
  await page.screenshot({ path: path.join(SHOTS, name) });
  if (viewport !== DESKTOP) await page.setViewportSize(DESKTOP);
}

/** The DOM holds only what the console itself made: one script (its own), no event-handler
 * attributes, no `javascript:` URLs, no frames, no raw control or bidi character in any text node.
 * Returns the document's text. */
async function auditDom(page, where) {
  const found = await page.evaluate((unsafeSource) => {
    const unsafe = new RegExp(unsafeSource);
    const out = { scripts: [], handlers: [], jsUrls: [], frames: 0, raw: [], text: "" };
    out.scripts = [...document.scripts].map((s) => (s.src ? new URL(s.src).pathname : `(inline) ${s.textContent.slice(0, 80)}`));
    for (const el of document.querySelectorAll("*")) {
      for (const a of el.attributes) {
        if (a.name.toLowerCase().startsWith("on")) out.handlers.push(`${el.tagName} ${a.name}=${a.value}`);
        if (/^(href|src|action|formaction|xlink:href|srcdoc|data)$/i.test(a.name) && /^\s*(javascript|vbscript):/i.test(a.value)) {
          out.jsUrls.push(`${el.tagName} ${a.name}=${a.value}`);
        }
      }
    }
    out.frames = document.querySelectorAll("iframe, frame, object, embed, base").length;
    const walker = document.createTreeWalker(document.documentElement, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (unsafe.test(n.data)) {
        out.raw.push(`${n.parentElement?.tagName}: ${JSON.stringify(n.data.slice(0, 200))}`);
      }
    }
    out.text = document.body.textContent;
    return out;
  }, UNSAFE_SOURCE);
  assert(found.scripts.length === 1 && found.scripts[0] === "/console/assets/app.js",
    `${where}: the only script must be /console/assets/app.js`, found.scripts);
  assert(found.handlers.length === 0, `${where}: an event-handler attribute is in the DOM`, found.handlers);
  assert(found.jsUrls.length === 0, `${where}: a javascript: URL is in the DOM`, found.jsUrls);
  assert(found.frames === 0, `${where}: a frame, object, embed or base element is in the DOM`);
  assert(found.raw.length === 0, `${where}: a raw control or bidi character is shown`, found.raw);
  checkProblems(where);
  return found.text;
}

// ---------------------------------------------------------------------------------------------
// HTTP without the browser (Node's fetch)

async function request(method, p, { cookie, csrf, origin, body, type = "application/json" } = {}) {
  const headers = {};
  if (cookie) headers.cookie = cookie;
  if (csrf) headers["x-csrf-token"] = csrf;
  if (origin) headers.origin = origin;
  if (body !== undefined) headers["content-type"] = type;
  const res = await fetch(base + p, {
    method,
    headers,
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    redirect: "manual",
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, headers: res.headers, text, json };
}

/** A request with a `Host` header of our choosing (fetch does not let one set it). */
function requestWithHost(p, host) {
  return new Promise((resolve, reject) => {
    const url = new URL(base + p);
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: "GET", headers: { host } }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode));
    });
    req.on("error", reject);
    req.end();
  });
}

/** Logs in over HTTP: the session cookie (`name=value`), the CSRF token and the raw Set-Cookie. */
async function apiLogin(who) {
  const res = await request("POST", "/console/api/login", { body: { name: who.name, token: who.token } });
  assert(res.status === 200, `login of ${who.name} over HTTP should succeed`, res);
  const setCookie = res.headers.getSetCookie().find((c) => c.startsWith("codemode_console="));
  assert(setCookie, "login should set the codemode_console cookie", res.headers.getSetCookie());
  return { cookie: setCookie.split(";")[0], csrf: res.json.csrf, setCookie, body: res.json };
}

function expectJsonError(res, status, what) {
  assert(res.status === status, `${what}: expected ${status}`, { status: res.status, body: res.text });
  assert(res.json && typeof res.json.error === "string" && res.json.error.length > 0, `${what}: errors are JSON {"error": …}`, res.text);
}

// ---------------------------------------------------------------------------------------------
// The flows

const CELL_APPROVE = "const r = await tools.demo_invoice_send({ shipmentId: 'SHP-1002', amount: 400 }); return r.invoiceId ? 'sent' : 'no'";
const CELL_DENY =
  "try { await tools.demo_invoice_send({ shipmentId: 'SHP-1003', amount: 5 }); return 'sent' } catch (e) { return e.code + ': ' + e.message }";
const CELL_SLOW = "await MCP.tricky.slow({ ms: 60000 }); return 1";
// Escapes (`\\u…`) reach the cell as JavaScript escapes; the raw U+202E in the comment is in the
// source itself (the run page's source view must show it escaped too).
const CELL_HOSTILE = [
  "// hostile \u202E strings <script>alert(0)</script>",
  "const echoed = await MCP.tricky.echo({ text: '<script>alert(1)</script>', url: 'javascript:alert(2)', bidi: 'abc\\u202Edcba\\u0007', img: '<img src=x onerror=alert(3)>' });",
  `const odd = await MCP.tricky.$call(${JSON.stringify(HOSTILE_NAME)}, { html: '<svg onload=alert(10)>' });`,
  "text('<script>alert(11)</script>');",
  "return { echoed: echoed.structuredContent, odd: odd.structuredContent };",
].join("\n");
const CELL_HOSTILE_APPROVAL =
  "try { await tools.demo_invoice_send({ shipmentId: '<script>alert(4)</script>\\u202E', amount: 1, note: '<img src=x onerror=alert(9)>' }); return 'sent' } catch (e) { return e.code + ': ' + e.message }";

async function staticChecks() {
  // The shell: same for everyone, no inline script or style, the security headers.
  for (const p of ["/console/", "/console"]) {
    const res = await request("GET", p);
    assert(res.status === 200, `GET ${p} should serve the console`, { status: res.status, body: res.text.slice(0, 300) });
    assert(/text\/html/.test(res.headers.get("content-type") || ""), `GET ${p} should be HTML`, res.headers.get("content-type"));
    const csp = res.headers.get("content-security-policy") || "";
    for (const d of ["default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "connect-src 'self'"]) {
      assert(csp.includes(d), `the console's CSP should have ${d}`, csp);
    }
    assert(!/unsafe-inline|unsafe-eval/.test(csp), "the console's CSP must not allow inline or eval'd script or style", csp);
    assert(res.headers.get("x-content-type-options") === "nosniff", "X-Content-Type-Options: nosniff", res.headers.get("x-content-type-options"));
    assert(/^deny$/i.test(res.headers.get("x-frame-options") || ""), "X-Frame-Options: DENY", res.headers.get("x-frame-options"));
    assert(res.headers.get("referrer-policy") === "no-referrer", "Referrer-Policy: no-referrer", res.headers.get("referrer-policy"));
    assert(/no-store/.test(res.headers.get("cache-control") || ""), "Cache-Control: no-store", res.headers.get("cache-control"));
    assert(!/<script(?![^>]*\bsrc=)[^>]*>/i.test(res.text), "index.html must not hold an inline script", res.text);
    assert(!/<style\b|\sstyle=|\son[a-z]+=/i.test(res.text), "index.html must not hold inline style or event handlers", res.text);
  }
  for (const [asset, type] of [["/console/assets/app.js", /javascript/], ["/console/assets/app.css", /text\/css/]]) {
    const res = await request("GET", asset);
    assert(res.status === 200, `GET ${asset}`, res.status);
    assert(type.test(res.headers.get("content-type") || ""), `${asset}'s content type`, res.headers.get("content-type"));
    assert(res.headers.get("x-content-type-options") === "nosniff", `${asset}: nosniff`);
    assert(res.headers.get("content-security-policy"), `${asset}: every console response carries the CSP`);
  }
  // The API needs a session; a foreign Host (DNS rebinding) is refused.
  expectJsonError(await request("GET", "/console/api/runs"), 401, "GET /console/api/runs without a cookie");
  expectJsonError(await request("GET", "/console/api/session"), 401, "GET /console/api/session without a cookie");
  expectJsonError(await request("GET", "/console/api/runs", { cookie: "codemode_console=forged" }), 401, "a forged session cookie");
  assert((await requestWithHost("/console/", "evil.example")) === 403, "a foreign Host must be refused (403)");
  assert((await requestWithHost("/console/api/session", "evil.example:80")) === 403, "a foreign Host must be refused on the API (403)");
  // Login takes JSON only (a form post from another site is not JSON).
  const form = await request("POST", "/console/api/login", { body: `name=ana&token=${ANA.token}`, type: "application/x-www-form-urlencoded" });
  expectJsonError(form, 415, "a form-encoded login");
}

async function flowLogin(page) {
  await page.goto(`${base}/console/`);
  await page.locator("form#login").waitFor();
  await login(page, { name: ANA.name, token: "wrong-token-0000000000" });
  await page.locator("#login-error").waitFor({ state: "visible" });
  assert(await page.locator("form#login").isVisible(), "a wrong token must keep the login form");
  await login(page, ANA);
  await waitText(page, "#operator", "ana");
  await waitText(page, "#live-status", "live");
  const cookies = await page.context().cookies();
  const session = cookies.find((c) => c.name === "codemode_console");
  assert(session, "the browser should hold the session cookie", cookies);
  assert(session.httpOnly && session.sameSite === "Strict" && session.path === "/console", "the session cookie's flags", session);
  assert((await page.evaluate(() => document.cookie)) === "", "the session cookie must not be readable by scripts");
  await auditDom(page, "after login");
}

async function flowApprove(page) {
  const { runId, requestId, first } = await park(CELL_APPROVE);
  // The run's page: parked at line 1.
  await route(page, `#/runs/${runId}`);
  await waitText(page, "#run-id", (t) => t.includes(runId));
  await waitText(page, "#run-status", "parked");
  const row = `table#run-calls tr${attr("data-request-id", requestId)}`;
  await waitText(page, `${row} td.status`, "parked");
  await waitText(page, `${row} td.tool`, (t) => t.includes("demo_invoice_send"));
  assert(await page.locator(`pre#run-source span.line${attr("data-line", 1)}.call-line`).count() === 1, "line 1 of the source should be marked as a call line");
  // The approvals view: the item, what it would do, and where in the cell.
  await nav(page, "approvals");
  const item = page.locator(`#approvals ${attr("data-approval", `${runId}/${requestId}`)}`);
  await item.waitFor();
  await waitText(page, "#approvals-count", /\b1\b/);
  const tool = await item.locator(".tool").textContent();
  assert(tool.includes("demo_invoice_send"), "the approval should name the tool", tool);
  const input = await item.locator("pre.input").textContent();
  assert(input.includes("SHP-1002") && input.includes("400"), "the approval should show the input", input);
  const line = await item.locator(".cell-line").textContent();
  assert(/line\s*1\b/i.test(line), "the approval should show the cell line", line);
  const reason = await item.locator(".reason").textContent();
  assert(reason.includes("approvals.require"), "the approval should say why it is gated", reason);
  assert((await item.locator(".scope").textContent()).trim() !== "", "the approval should show the run scope");
  await screenshot(page, "approvals.png", PHONE);
  await clickPosting(page, item.locator("button.approve"), `/console/api/approvals/`);
  const done = await mcpSettle(first);
  assert(done.status === "completed" && done.value === "sent", "the approved run should complete", done);
  await item.waitFor({ state: "detached" });
  // A settled run is gone for `wait`; that failed lookup must not rewrite the run's record.
  const again = await mcpWait(runId);
  assert(again.status === "failed", "a completed run cannot be waited on again", again);
  const record = await runRecord(page, runId);
  assert(record.status === "completed", "a wait on a completed run must not rewrite its status", { status: record.status, error: record.error });
  // Its page after the fact: who decided.
  await route(page, `#/runs/${runId}`);
  await waitText(page, "#run-status", "completed");
  await waitText(page, `${row} td.status`, "completed");
  await waitText(page, `${row} td.decided`, (t) => t.includes("ana"));
  await waitText(page, `${row} td.line`, /\b1\b/);
  await waitText(page, "pre#run-result", (t) => t.includes("sent"));
  await auditDom(page, "the approved run's page");
  await screenshot(page, "run.png");
  return runId;
}

async function flowDeny(page) {
  const { runId, requestId, first } = await park(CELL_DENY);
  await nav(page, "approvals");
  const item = page.locator(`#approvals ${attr("data-approval", `${runId}/${requestId}`)}`);
  await item.locator("input.deny-reason").fill("not today");
  await clickPosting(page, item.locator("button.deny"), `/console/api/approvals/`);
  const done = await mcpSettle(first);
  await item.waitFor({ state: "detached" });
  assert(done.status === "completed", "a denied call is a catchable error: the cell completes", done);
  assert(String(done.value).includes("approval denied") && String(done.value).includes("not today"), "the cell should see the denial and its reason", done);
  await route(page, `#/runs/${runId}`);
  const row = `table#run-calls tr${attr("data-request-id", requestId)}`;
  await waitText(page, "#run-status", "completed");
  await waitText(page, `${row} td.status`, "denied");
  await waitText(page, `${row} td.decided`, (t) => t.includes("ana"));
  return runId;
}

async function flowAbort(page) {
  const first = await mcpExec(CELL_SLOW);
  assert(first.status === "waiting", "the slow cell should come back waiting", first);
  const runId = first.runId;
  await route(page, `#/runs/${runId}`);
  await waitText(page, "#run-status", /^\s*(waiting|running)\s*$/);
  await page.locator("button#abort").click();
  await clickPosting(page, page.locator("button#abort-confirm"), `/console/api/runs/`);
  await waitText(page, "#run-status", "aborted");
  const after = await mcpWait(runId);
  assert(after.status === "failed", "wait on an aborted run should fail", after);
  // ... and leaves the run's record as it was: aborted, not failed by the lookup.
  const record = await runRecord(page, runId);
  assert(record.status === "aborted", "a wait on an aborted run must not rewrite its status", { status: record.status, error: record.error });
  return runId;
}

async function flowRuns(page, { approved, aborted }) {
  await nav(page, "runs");
  const row = (id) => `table#runs tr${attr("data-run-id", id)}`;
  await waitText(page, `${row(approved)} td.status`, "completed");
  await waitText(page, `${row(aborted)} td.status`, "aborted");
  await waitText(page, `${row(approved)} td.tools`, (t) => t.includes("demo_invoice_send"));
  await waitText(page, "#overview", (t) => t.trim() !== "");
  await screenshot(page, "runs.png");
  // Filters: by status, then by tool.
  await page.locator("select#filter-status").selectOption("aborted");
  await page.locator(row(approved)).waitFor({ state: "detached" });
  await page.locator(row(aborted)).waitFor();
  await page.locator("select#filter-status").selectOption({ index: 0 });
  await page.locator(row(approved)).waitFor();
  const tool = page.locator("input#filter-tool");
  await tool.fill(INVOICE);
  await tool.dispatchEvent("change");
  await page.locator(row(aborted)).waitFor({ state: "detached" });
  await page.locator(row(approved)).waitFor();
  await tool.fill("");
  await tool.dispatchEvent("change");
  await page.locator(row(aborted)).waitFor();
  await auditDom(page, "the runs view");
}

async function flowHostile(page) {
  const out = await mcpExec(CELL_HOSTILE);
  assert(out.status === "completed", "the hostile echo cell should complete", out);
  // A run that completes within its exec is not named in the result: find it by its hostile tool
  // in the runs view (the filter matches part of a tool id), and follow its link.
  await nav(page, "runs");
  const filter = page.locator("input#filter-tool");
  await filter.fill(HOSTILE_NAME);
  await filter.dispatchEvent("change");
  const rows = page.locator("table#runs tr[data-run-id]");
  await until("the hostile run to be the only run listed for its tool", async () => {
    if ((await rows.count()) !== 1) return false;
    return (await rows.first().locator("td.tools").textContent()).includes(HOSTILE_NAME);
  }, { last: async () => rows.allTextContents() });
  const runId = await rows.first().getAttribute("data-run-id");
  await auditDom(page, "the runs view with a hostile run");
  await rows.first().locator("td.run a").click();
  await waitText(page, "#run-id", (t) => t.includes(runId));
  await waitText(page, "#run-status", "completed");
  await waitText(page, "table#run-calls", (t) => t.includes(HOSTILE_NAME));
  const shown = await waitText(page, "body", (t) => t.includes("<script>alert(1)</script>"));
  const where = [await textOf(page, "pre#run-result"), ...(await page.locator("table#run-calls td.output").allTextContents())].join("\n");
  assert(where.includes("<script>alert(1)</script>"), "the echoed markup should show literally in the result or an output", where);
  assert(where.includes("javascript:alert(2)"), "the echoed URL should show as text", where);
  assert(where.includes("<script>alert(6)</script>"), "the hostile tool's output should show literally", where);
  const text = await auditDom(page, "the hostile run's page");
  assert(VISIBLE_RLO.test(text), "U+202E should be shown as a visible escape", shown.slice(0, 3000));
  assert(VISIBLE_BEL.test(text), "U+0007 should be shown as a visible escape", shown.slice(0, 3000));
  assert(VISIBLE_RLO.test((await textOf(page, "pre#run-source")) || ""), "the raw U+202E in the source should be shown escaped");
  // The filter stays while the console is open: clear it.
  await nav(page, "runs");
  await filter.fill("");
  await filter.dispatchEvent("change");
  await until("the runs view to list every run again", async () => (await rows.count()) > 1);
  // A hostile input parked for approval.
  const parked = await park(CELL_HOSTILE_APPROVAL);
  await nav(page, "approvals");
  const item = page.locator(`#approvals ${attr("data-approval", `${parked.runId}/${parked.requestId}`)}`);
  await item.waitFor();
  const input = await item.locator("pre.input").textContent();
  assert(input.includes("<script>alert(4)</script>"), "the hostile input should show literally", input);
  assert(VISIBLE_RLO.test(input), "U+202E in the input should be shown as a visible escape", input);
  await auditDom(page, "the approvals view with a hostile input");
  return parked;
}

async function flowHttpAttacks(parked) {
  const ana = await apiLogin(ANA);
  assert(/;\s*HttpOnly/i.test(ana.setCookie), "the session cookie must be HttpOnly", ana.setCookie);
  assert(/;\s*SameSite=Strict/i.test(ana.setCookie), "the session cookie must be SameSite=Strict", ana.setCookie);
  assert(/;\s*Path=\/console\b/i.test(ana.setCookie), "the session cookie's path is /console", ana.setCookie);
  assert(ana.body.operator === "ana" && /^[0-9a-f]{16,}$/i.test(ana.csrf || ""), "login answers the operator and a hex CSRF token", ana.body);
  const session = await request("GET", "/console/api/session", { cookie: ana.cookie });
  assert(session.status === 200 && session.json?.operator === "ana", "the session endpoint names the operator", session);
  // A tampered signature is not a session.
  // (A character in the middle: the last one of a base64 text may carry unused bits.)
  const at = ana.cookie.indexOf("=") + 1 + Math.floor((ana.cookie.length - ana.cookie.indexOf("=") - 1) / 2);
  const flipped = `${ana.cookie.slice(0, at)}${ana.cookie[at] === "a" ? "b" : "a"}${ana.cookie.slice(at + 1)}`;
  expectJsonError(await request("GET", "/console/api/runs", { cookie: flipped }), 401, "a session cookie with a tampered signature");
  // Deciding needs the CSRF header, the right one, JSON, a same-origin (or no) Origin, a valid body.
  const decide = `/console/api/approvals/${encodeURIComponent(parked.runId)}/${parked.requestId}`;
  const approve = { decision: "approve" };
  const noCsrf = await request("POST", decide, { cookie: ana.cookie, body: approve });
  expectJsonError(noCsrf, 403, "a decision without X-CSRF-Token");
  assert(/csrf/i.test(noCsrf.json.error), "the 403 should name the CSRF token", noCsrf.json);
  expectJsonError(await request("POST", decide, { cookie: ana.cookie, csrf: "00".repeat(16), body: approve }), 403, "a decision with a wrong CSRF token");
  expectJsonError(await request("POST", decide, { cookie: ana.cookie, csrf: ana.csrf, origin: "http://evil.example", body: approve }), 403, "a decision from a foreign Origin");
  const noSession = await request("POST", decide, { csrf: ana.csrf, body: approve });
  assert(noSession.status === 401 || noSession.status === 403, "a decision without a session must be refused (401/403)", noSession);
  const plain = await request("POST", decide, { cookie: ana.cookie, csrf: ana.csrf, body: JSON.stringify(approve), type: "text/plain" });
  assert(plain.status >= 400 && plain.status < 500, "a decision that is not JSON must be refused", plain);
  expectJsonError(await request("POST", decide, { cookie: ana.cookie, csrf: ana.csrf, body: { decision: "maybe" } }), 400, "a decision that is neither approve nor deny");
  expectJsonError(
    await request("POST", `/console/api/approvals/${encodeURIComponent(parked.runId)}/${parked.requestId + 7}`, { cookie: ana.cookie, csrf: ana.csrf, body: approve }),
    404,
    "a decision for a call that is not parked",
  );
  expectJsonError(await request("POST", `/console/api/runs/${encodeURIComponent(parked.runId)}/abort`, { cookie: ana.cookie, body: {} }), 403, "an abort without X-CSRF-Token");
  // None of that decided anything.
  const list = await request("GET", "/console/api/approvals", { cookie: ana.cookie });
  assert(list.status === 200, "GET /console/api/approvals", list);
  const still = (list.json.approvals || []).find((a) => a.runId === parked.runId && a.requestId === parked.requestId);
  assert(still && still.toolId === INVOICE, "the refused requests must leave the call parked", list.json);
  const runs = await request("GET", `/console/api/runs?status=parked`, { cookie: ana.cookie });
  assert(runs.status === 200 && runs.json.runs.some((r) => r.runId === parked.runId && r.status === "parked"), "the run is listed as parked", runs.json);
  // One session's CSRF token is not another's; logging out needs it, and ends the session on the
  // server (the cookie is refused afterwards, not only cleared in the browser).
  const other = await apiLogin(ANA);
  expectJsonError(await request("POST", decide, { cookie: ana.cookie, csrf: other.csrf, body: approve }), 403, "a decision with another session's CSRF token");
  expectJsonError(await request("POST", "/console/api/logout", { cookie: other.cookie, body: {} }), 403, "a logout without X-CSRF-Token");
  const out = await request("POST", "/console/api/logout", { cookie: other.cookie, csrf: other.csrf, body: {} });
  assert(out.status === 204, "logout answers 204", out);
  expectJsonError(await request("GET", "/console/api/runs", { cookie: other.cookie }), 401, "a logged-out session's cookie");
  assert((await request("GET", "/console/api/runs", { cookie: ana.cookie })).status === 200, "logging one session out leaves the others");
}

async function flowSecondOperator(parked) {
  const { context, page } = await newPage("bo");
  try {
    await page.goto(`${base}/console/`);
    await login(page, BO);
    await waitText(page, "#operator", "bo");
    await nav(page, "approvals");
    const item = page.locator(`#approvals ${attr("data-approval", `${parked.runId}/${parked.requestId}`)}`);
    await item.locator("input.deny-reason").fill("bo says <i>no</i>");
    await clickPosting(page, item.locator("button.deny"), `/console/api/approvals/`);
    const done = await mcpSettle(parked.first);
    await item.waitFor({ state: "detached" });
    assert(done.status === "completed" && String(done.value).includes("approval denied"), "bo's denial should reach the cell", done);
    await route(page, `#/runs/${parked.runId}`);
    const row = `table#run-calls tr${attr("data-request-id", parked.requestId)}`;
    await waitText(page, "#run-status", "completed");
    await waitText(page, `${row} td.decided`, (t) => t.includes("bo"));
    await auditDom(page, "bo's view of the run bo decided");
    // Logging out ends the browser's session.
    await page.locator("button#logout").click();
    await page.locator("form#login").waitFor();
    const status = await page.evaluate(() => fetch("/console/api/runs").then((r) => r.status));
    assert(status === 401, "after logout the browser has no session", status);
    checkProblems("bo's context");
  } finally {
    await context.close();
  }
}

async function flowServers(page) {
  await nav(page, "servers");
  const row = `table#servers tr${attr("data-server", "tricky")}`;
  await waitText(page, `${row} td.state`, "connected");
  await waitText(page, `${row} td.name`, "tricky");
  await waitText(page, `${row} td.tools`, /\b3\b/);
  await waitText(page, "#approvals-count", /^\s*0?\s*$/); // every decided call has run by now
  const before = upstreamPid();
  assert(before && alive(before) && isConsoleServer(before), "the upstream server should have written its pid", before);
  // Kill it and keep it from starting again until the page has shown it failed.
  const down = path.join(WORKDIR, "server.down");
  fs.writeFileSync(down, "");
  process.kill(before, "SIGKILL");
  await waitText(page, `${row} td.state`, "failed", 30_000);
  fs.unlinkSync(down);
  // Restarts back off (1 s, 2 s, 4 s, …): the one after the file is gone succeeds.
  await waitText(page, `${row} td.state`, "connected", 90_000);
  await waitText(page, `${row} td.restarts`, (t) => t.trim() !== "" && t.trim() !== "0");
  const after = upstreamPid();
  assert(after && after !== before && alive(after), "codemode should have started the server again", { before, after });
  // The header's count of servers down clears at the next live tick.
  await page.locator("#servers-down").waitFor({ state: "hidden", timeout: 30_000 });
  await auditDom(page, "the servers view");
  await screenshot(page, "servers.png");
  const echo = await mcpExec("return await MCP.tricky.echo.value({ back: true })");
  assert(echo.status === "completed" && echo.value?.back === true, "the restarted server should answer", echo);
}

async function flowFleet(page) {
  await nav(page, "fleet");
  await page.locator("table#replicas tr[data-replica]").first().waitFor();
  assert((await page.locator("table#replicas tr[data-replica]").count()) === 1, "one replica");
  await waitText(page, "table#replicas tr[data-replica] td.id", (t) => t.trim() !== "");
  await waitText(page, "#fleet-totals", (t) => t.trim() !== "");
  assert((await page.locator("svg#chart-latency").count()) === 1, "the latency chart is there");
  await page.locator("svg#chart-cells polyline").first().waitFor({ state: "attached", timeout: 30_000 });
  await waitText(page, "#live-status", "live");
  await auditDom(page, "the fleet view");
  await screenshot(page, "fleet.png");
}

async function flowLoginLimits() {
  const wrong = await request("POST", "/console/api/login", { body: { name: ANA.name, token: "wrong-token-0000000000" } });
  expectJsonError(wrong, 401, "a wrong token");
  const noone = await request("POST", "/console/api/login", { body: { name: "nobody", token: ANA.token } });
  expectJsonError(noone, 401, "an unknown operator");
  assert(noone.json.error === wrong.json.error, "a wrong name and a wrong token must get the same answer", [wrong.json, noone.json]);
  // Last: failures from this address lock logins out for a minute (the browser's wrong login in
  // flow a and the two above count too).
  let limited = null;
  for (let i = 0; i < 6 && !limited; i++) {
    const res = await request("POST", "/console/api/login", { body: { name: ANA.name, token: `wrong-token-${i}-000000000` } });
    if (res.status === 429) limited = res;
    else expectJsonError(res, 401, `wrong login ${i + 1}`);
  }
  assert(limited, "6 wrong logins in a row should be rate limited (429)");
  expectJsonError(limited, 429, "the rate-limited login");
  assert(/^\d+$/.test(limited.headers.get("retry-after") || "") && Number(limited.headers.get("retry-after")) > 0, "a 429 carries Retry-After", limited.headers.get("retry-after"));
  assert(/too many failed logins/i.test(limited.json.error), "the 429 says why", limited.json);
  // Locked out means the right token too: guessing cannot go on.
  const right = await request("POST", "/console/api/login", { body: { name: ANA.name, token: ANA.token } });
  assert(right.status === 429, "a locked-out address cannot log in even with the right token", right);
}

// ---------------------------------------------------------------------------------------------

async function main() {
  assert(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: run scripts/setup.sh (it installs Debian's chromium)`);
  fs.mkdirSync(WORKDIR, { recursive: true });
  fs.mkdirSync(SHOTS, { recursive: true });
  for (const f of ["server.pid", "server.down"]) fs.rmSync(path.join(WORKDIR, f), { force: true });
  const config = path.join(WORKDIR, "console.json5");
  fs.writeFileSync(config, `${JSON.stringify({
    tools: { codeMode: { enabled: true, timeoutMs: 2000 } },
    approvals: { require: [INVOICE], timeoutMs: 500 },
    mcpServers: {
      tricky: {
        command: process.execPath,
        args: [path.join(HERE, "console_server.js")],
        env: { CONSOLE_SERVER_PID_FILE: path.join(WORKDIR, "server.pid"), CONSOLE_SERVER_DOWN_FILE: path.join(WORKDIR, "server.down") },
      },
    },
    console: { operators: [{ name: ANA.name, token: ANA.token }, { name: BO.name, tokenEnv: "CONSOLE_TEST_BO_TOKEN" }] },
  }, null, 2)}\n`);

  serve = new Serve(BIN, config, { ...process.env, CONSOLE_TEST_BO_TOKEN: BO.token, RUST_LOG: process.env.RUST_LOG || "warn,codemode_mcp=info" });
  base = await serve.base();
  const announced = await until("codemode to announce the console", () => serve.lines.find((l) => l.startsWith("codemode: console at ")), { timeoutMs: 10_000 });
  assert(announced.startsWith(`codemode: console at ${base}/console`) && !/token/i.test(announced), "with operators configured the console line names no token", announced);

  await staticChecks();

  mcp = new Client({ name: "console-e2e", version: "0.0.0" }); // no elicitation: gated calls park
  await mcp.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
  await until("the upstream server to connect", async () => {
    const out = await mcpExec("return await MCP.tricky.echo.value({ hello: 1 })");
    return out.status === "completed" && out.value?.hello === 1;
  }, { timeoutMs: 30_000, everyMs: 250 });

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const { page } = await newPage("ana");

  await flowLogin(page);
  const approved = await flowApprove(page);
  await flowDeny(page);
  const aborted = await flowAbort(page);
  await flowRuns(page, { approved, aborted });
  const parked = await flowHostile(page);
  await flowHttpAttacks(parked);
  await flowSecondOperator(parked);
  await flowServers(page);
  await flowFleet(page);
  await flowLoginLimits();

  checkProblems("the end");
  for (const who of [ANA, BO]) {
    assert(!serve.stderr.includes(who.token), `${who.name}'s token must never be logged`);
  }
}

let failure = null;
try {
  await main();
} catch (e) {
  failure = e;
}
const cleanupErrors = await cleanup();
if (failure) {
  console.error(`FAILED: ${failure.stack || failure}`);
  if (consoleErrors.length) console.error(`--- browser console errors:\n${consoleErrors.slice(-50).join("\n")}`);
  if (serve) {
    console.error(`--- codemode serve stderr (last 200 lines):\n${serve.tail()}\n--- exit: ${show(serve.exit)}`);
    if (serve.stdout) console.error(`--- codemode serve stdout:\n${serve.stdout.slice(-4000)}`);
  }
  if (cleanupErrors.length) console.error(`--- cleanup: ${cleanupErrors.join("; ")}`);
  process.exit(1);
}
if (cleanupErrors.length) {
  console.error(`FAILED to stop cleanly: ${cleanupErrors.join("; ")}`);
  process.exit(1);
}
console.log("ok: console in a real browser");
