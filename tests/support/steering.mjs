// Steers a running `beflow watch --http` from its page, in a real headless Chromium, as a person would:
//
//   node steering.mjs MODULES URL TOKEN KEYS ARTIFACTS
//
// KEYS is JSON: {"long": the issue whose run keeps the one lane busy, "queued": a ready issue, "failed": a failed
// issue}. The page is opened with its token link (the token becomes its cookie), then: a new issue filed from the
// form (it appears first in the queue), the queued issue raised twice with its ▲ (the queue reorders), moved to
// open from its page (the status shows), the failed issue retried from its page, and the long run cancelled from
// its lane — after which the watch starts the issues left, the retried one among them (its page shows its run).
// It prints one JSON line of what it saw; a screenshot of each step goes to ARTIFACTS.
import { join } from "node:path";
import { brokenTokens, launch, watchedPage } from "./browser.mjs";

const [modules, url, token, keysJson, artifacts] = process.argv.slice(2);
const keys = JSON.parse(keysJson);

const timeout = 60_000;
const seen = { dialogs: [], pageerrors: [], steps: [] };
const queue = () => [...document.querySelectorAll("#queue tbody tr")].map((tr) => tr.dataset.issue);

const browser = await launch(modules);
try {
  const page = await watchedPage(browser, seen);
  const shot = async (name) => {
    seen.steps.push(name);
    await page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });
  };
  const live = async (path) => {
    await page.goto(url + path, { waitUntil: "load" });
    await page.waitForFunction(() => document.getElementById("connection").textContent === "live", { timeout });
  };

  // The token link: the token becomes the page's cookie, and leaves the address.
  await page.goto(`${url}/?token=${token}`, { waitUntil: "load" });
  seen.address = page.url();
  await page.waitForFunction((key) => document.querySelector(`.lane[data-issue="${key}"]`), { timeout }, keys.long);
  await page.waitForFunction((key) => document.querySelector(`#queue tr[data-issue="${key}"]`), { timeout }, keys.queued);
  seen.queueBefore = await page.evaluate(queue);

  // A new issue from the form: ready, priority 1 — first in the queue.
  await page.evaluate(() => { document.querySelector("#new-issue").open = true; });
  await page.type("#new-issue input[name=title]", "Filed from the page");
  await page.type("#new-issue textarea[name=body]", "acp-test: say filed");
  await page.type("#new-issue input[name=labels]", "docs, ui");
  await page.$eval("#new-issue input[name=priority]", (node) => { node.value = "1"; });
  await page.evaluate(() => document.querySelector("#new-issue button[type=submit]").click());
  await page.waitForFunction(() => document.querySelector("#new-issue form").dataset.done, { timeout });
  seen.filed = await page.$eval("#new-issue form", (form) => form.dataset.done);
  seen.filedSaid = await page.$eval("#new-issue .said", (node) => node.textContent);
  seen.formCleared = await page.$eval("#new-issue input[name=title]", (node) => node.value);
  await page.waitForFunction((key) => document.querySelector("#queue tbody tr")?.dataset.issue === key, { timeout }, seen.filed);
  seen.queueFiled = await page.evaluate(queue);
  await shot("filed");
  // The steering controls at a phone's width: no short token broken, no page wider than the window.
  seen.layout = {};
  await page.setViewport({ width: 390, height: 900 });
  for (const path of ["/", `/issues/${keys.failed}`]) {
    await live(path);
    if (path === "/") {
      await page.waitForFunction(() => document.querySelector("#queue td.priority button"), { timeout });
      await page.evaluate(() => { document.querySelector("#new-issue").open = true; });
    }
    seen.layout[path] = { broken: await page.evaluate(brokenTokens), width: await page.evaluate(() => document.documentElement.scrollWidth) };
    await shot(path === "/" ? "home-390" : "issue-390");
  }
  await page.setViewport({ width: 1366, height: 900 });
  await live("/");
  await page.waitForFunction(() => document.querySelector("#queue td.priority button"), { timeout });

  // The queue's order: the queued issue raised twice (priority 2 -> 1 -> 0), ahead of the new one.
  for (const priority of [1, 0]) {
    await page.evaluate((key) => document.querySelector(`#queue tr[data-issue="${key}"] td.priority button`).click(), keys.queued);
    await page.waitForFunction(
      (key, p) => document.querySelector(`#queue tr[data-issue="${key}"] td.priority`)?.firstChild?.textContent === String(p),
      { timeout },
      keys.queued,
      priority,
    );
  }
  await page.waitForFunction((key) => document.querySelector("#queue tbody tr")?.dataset.issue === key, { timeout }, keys.queued);
  seen.queueReordered = await page.evaluate(queue);
  await shot("reordered");

  // A status a person may choose, from the issue's page: the queued issue moved to open.
  await live(`/issues/${keys.queued}`);
  seen.choices = await page.$$eval("#set-status select option", (options) => options.map((o) => o.value));
  await page.select("#set-status select", "open");
  await page.type("#set-status input[name=note]", "not this week");
  await page.evaluate(() => document.querySelector("#set-status button").click());
  await page.waitForFunction(() => document.querySelector("#issue-meta .status").textContent === "open", { timeout });
  await page.waitForFunction(() => document.querySelectorAll(".comment").length === 1, { timeout });
  seen.statusShown = await page.$eval("#issue-meta .status", (node) => node.textContent);
  seen.statusNote = await page.$eval(".comment p", (node) => node.textContent);
  await shot("moved");

  // The failed issue retried from its page: ready again, its retry button gone.
  await live(`/issues/${keys.failed}`);
  seen.failedChoices = await page.$$eval("#set-status select option", (options) => options.map((o) => o.value));
  await page.evaluate(() => document.querySelector("#retry button").click());
  await page.waitForFunction(() => document.querySelector("#issue-meta .status").textContent !== "failed", { timeout });
  seen.retried = await page.$eval("#issue-meta .status", (node) => node.textContent);
  seen.retryGone = await page.evaluate(() => document.getElementById("retry") === null);

  // The long run cancelled from its lane; the watch goes on with the queue, the retried issue among it.
  await live("/");
  await page.waitForFunction((key) => document.querySelector(`#queue tr[data-issue="${key}"]`), { timeout }, keys.failed);
  seen.queueRetried = await page.evaluate(queue);
  // The lane's cancel button comes with its run (the queue's rows may be drawn first).
  await page.waitForFunction((key) => document.querySelector(`.lane[data-issue="${key}"] .meta button`), { timeout }, keys.long);
  await page.evaluate((key) => document.querySelector(`.lane[data-issue="${key}"] .meta button`).click(), keys.long);
  await page.waitForFunction((key) => !document.querySelector(`.lane[data-issue="${key}"]`), { timeout }, keys.long);
  await live(`/issues/${keys.failed}`);
  await page.waitForFunction(() => document.querySelectorAll("#issue-runs tbody tr").length >= 1, { timeout: 120_000 });
  seen.failedRuns = await page.$$eval("#issue-runs tbody tr", (rows) => rows.length);
  await shot("retried-run");
} catch (error) {
  seen.error = String(error);
  const pages = await browser.pages();
  seen.debug = await pages[pages.length - 1].evaluate(async () => ({
    rows: [...document.querySelectorAll("#queue tbody tr")].map((tr) => tr.innerHTML),
    state: await (await fetch("/api/v1/state")).json(),
  })).catch((e) => String(e));
  seen.said = await Promise.all((await browser.pages()).map((p) => p.$$eval(".said", (nodes) => nodes.map((n) => n.textContent)).catch(() => null)));
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + "\n");
process.exit(0);
