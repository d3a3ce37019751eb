// The ops console as an operator uses it, in headless Chromium: a wrong key is refused, the
// right one shows the pools; traffic moves the live charts; draining a replica changes its
// state on the page; a limit changed on the page is what the admin API reads back.
// Usage: node console_check.mjs URL ADMIN_KEY TEAM_KEY CHROMIUM ARTIFACT_DIR
import { chromium } from "playwright-core";

const [url, admin, teamKey, executablePath, out] = process.argv.slice(2);
const fail = (msg) => { console.error("console check failed:", msg); process.exit(1); };
const browser = await chromium.launch({ executablePath, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url + "/console");
  await page.screenshot({ path: out + "/console-login.png" });

  await page.fill("#key", "not-the-key");
  await page.click("#login-form button");
  await page.waitForSelector("#login-error:has-text('Not logged in')");
  if (!(await page.isHidden("#console"))) fail("the console showed without the key");

  await page.fill("#key", admin);
  await page.click("#login-form button");
  await page.waitForSelector("#pools tbody tr[data-replica]");
  const key = await page.evaluate(() => sessionStorage.getItem("kiln.admin_key"));
  if (key !== admin) fail("the key is not in session storage");
  const local = await page.evaluate(() => localStorage.length);
  if (local !== 0) fail("something went to local storage");
  await page.waitForFunction(() => [...document.querySelectorAll("#pools td.state")].some((td) => td.textContent === "serving"),
                             null, { timeout: 30000 });

  // Traffic for the charts: streams through the team's key.
  const chat = (i) => fetch(url + "/v1/chat/completions", {
    method: "POST", headers: { Authorization: "Bearer " + teamKey, "Content-Type": "application/json" },
    body: JSON.stringify({ model: "chat-7b", max_tokens: 40, messages: [{ role: "user", content: "console traffic " + (i % 5) }] }) });
  for (let round = 0; round < 4; ++round) await Promise.all(Array.from({ length: 16 }, (_, i) => chat(round * 16 + i)));
  // A batch on idle capacity, and traffic that goes on while the charts draw.
  const lines = Array.from({ length: 400 }, (_, i) => JSON.stringify({ custom_id: "c" + i, method: "POST", url: "/v1/chat/completions",
    body: { model: "chat-7b", max_tokens: 200, messages: [{ role: "user", content: "console batch " + i }] } })).join("\n");
  const form = new FormData();
  form.append("purpose", "batch");
  form.append("file", new Blob([lines]), "console.jsonl");
  const file = await (await fetch(url + "/v1/files", { method: "POST", headers: { Authorization: "Bearer " + teamKey }, body: form })).json();
  const batch = await (await fetch(url + "/v1/batches", { method: "POST", headers: { Authorization: "Bearer " + teamKey },
    body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }) })).json();
  if (!batch.id) fail("batch " + JSON.stringify(batch));
  const until = Date.now() + 7000;
  const steady = (async () => { for (let i = 0; Date.now() < until; ++i) await Promise.all([chat(i), chat(i + 1), chat(i + 2)]); })();
  await page.waitForSelector(`#batches td:has-text('${batch.id}')`, { timeout: 15000 });
  await steady;
  await page.waitForFunction(() => Number(document.getElementById("now-tps").textContent) > 0 ||
                                   document.getElementById("now-ttft").textContent !== "–", null, { timeout: 15000 });
  await page.waitForSelector("#live.on");
  await page.screenshot({ path: out + "/console.png", fullPage: true });

  // Drain the first replica from the page; its state changes there.
  const first = await page.getAttribute("#pools tbody tr[data-replica]", "data-replica");
  page.on("dialog", (d) => d.accept());
  await page.click(`#pools tr[data-replica="${first}"] button.drain`);
  await page.waitForSelector("#notice:has-text('Drain " + first + ": done')");
  await page.waitForFunction((id) => {
    const row = document.querySelector(`#pools tr[data-replica="${id}"]`);
    const state = row ? row.querySelector("td.state").textContent : "gone";
    return state !== "serving";
  }, first, { timeout: 30000 });
  const shown = await page.evaluate((id) => {
    const row = document.querySelector(`#pools tr[data-replica="${id}"]`);
    return row ? row.querySelector("td.state").textContent : "gone";
  }, first);
  console.log("replica " + first + " after the drain: " + shown);
  // Resumed from the page, it serves again.
  await page.click(`#pools tr[data-replica="${first}"] button.resume`);
  await page.waitForSelector("#notice:has-text('Resume " + first + ": done')");
  await page.waitForFunction((id) => {
    const row = document.querySelector(`#pools tr[data-replica="${id}"]`);
    return row && row.querySelector("td.state").textContent === "serving" && row.querySelector("button.drain");
  }, first, { timeout: 30000 });
  console.log("replica " + first + " after resuming: serving");

  // A limit set on the page is the limit the API holds.
  const team = await page.getAttribute("#teams tbody tr[data-team]", "data-team");
  await page.fill(`#teams tr[data-team="${team}"] input.limit`, "12345");
  await page.click(`#teams tr[data-team="${team}"] button.save-limit`);
  await page.waitForSelector(`#teams tr[data-team="${team}"] td.limits:has-text('12345 tok/min')`, { timeout: 10000 });
  const limits = await (await fetch(url + "/admin/teams/" + team + "/limits", { headers: { Authorization: "Bearer " + admin } })).json();
  if (!limits.limits.some((l) => l.tokens_per_minute === 12345)) fail("limit not stored: " + JSON.stringify(limits));
  await page.screenshot({ path: out + "/console-after-actions.png", fullPage: true });

  await page.click("#logout");
  if ((await page.evaluate(() => sessionStorage.getItem("kiln.admin_key"))) !== null) fail("the key outlived the logout");
  if (errors.length) fail("page errors: " + errors.join("; "));
  console.log("console: login refused and taken, pools, live charts, drain, limit change, logout, all as expected");
} finally {
  await browser.close();
}
