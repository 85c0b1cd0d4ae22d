// Drives beflow's live page in a real headless Chromium (@sparticuz/chromium, which carries its binary, through
// puppeteer-core), both installed in tools/browser by scripts/test.
//
//   node dashboard.mjs MODULES URL KEY ARTIFACTS
//
// It opens the page, says `ready` on stdout, then waits — for conditions, never for a duration — until the lane of
// issue KEY appears, its progress lines and usage stream in, and its run shows in the recent runs with an outcome. It prints
// one JSON line of what it saw, and saves a screenshot of each step in ARTIFACTS.
import { join } from "node:path";
import { brokenTokens, launch } from "./browser.mjs";

const [modules, url, key, artifacts] = process.argv.slice(2);

const timeout = 90_000;
const seen = { steps: [], latency: [] };
const browser = await launch(modules);
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 390, height: 844 }); // a phone
  page.on("pageerror", (error) => seen.steps.push({ pageerror: String(error) }));
  await page.goto(url, { waitUntil: "load" });
  await page.waitForFunction(() => document.getElementById("connection").textContent === "live", { timeout });
  await page.screenshot({ path: join(artifacts, "0-idle.png"), fullPage: true });
  process.stdout.write("ready\n");

  const lane = `.lane[data-issue="${key}"]`;
  await page.waitForSelector(lane, { timeout });
  seen.title = await page.$eval(`${lane} .title`, (node) => node.textContent);
  seen.steps.push("lane");
  await page.screenshot({ path: join(artifacts, "1-lane.png"), fullPage: true });

  for (const text of ["reading the code", "tests pass"]) {
    await page.waitForFunction(
      (selector, wanted) => [...document.querySelectorAll(`${selector} .progress li`)].some((li) => li.textContent === wanted),
      { timeout },
      lane,
      text,
    );
    seen.steps.push(`progress: ${text}`);
  }
  await page.waitForSelector(`${lane} .usage`, { timeout });
  seen.usage = await page.$eval(`${lane} .usage`, (node) => node.textContent);
  // The health line agrees with the lanes: what they reported so far.
  seen.healthUsed = await page.$$eval("#health-list dt", (dts) => dts.find((dt) => dt.textContent === "used")?.nextElementSibling.textContent ?? null);
  await page.screenshot({ path: join(artifacts, "2-progress.png"), fullPage: true });
  // A busy lane breaks no short token (its elapsed time, its usage, the health's counts), on a phone or a laptop.
  seen.layout = { 390: await page.evaluate(brokenTokens) };
  await page.setViewport({ width: 1366, height: 844 });
  seen.layout[1366] = await page.evaluate(brokenTokens);
  await page.setViewport({ width: 390, height: 844 });

  // The tail shows its newest lines (scrolled to its end); a reader who scrolled up stays where they are.
  const tail = `${lane} pre.tail`;
  await page.waitForFunction(
    (selector) => {
      const pre = document.querySelector(selector);
      // (the tail follows the state's reads, a few seconds after the lane's own events: its newest line is awaited)
      const newest = pre && pre.textContent.includes("line 30");
      return newest && pre.scrollHeight > pre.clientHeight + 20 && pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    },
    { timeout },
    tail,
  );
  seen.tailText = await page.$eval(tail, (pre) => pre.textContent);
  seen.tailShows = seen.tailText.includes("line 30");
  await page.$eval(tail, (pre) => (pre.scrollTop = 10));
  await page.waitForFunction(
    (selector) => [...document.querySelectorAll(`${selector} .progress li`)].some((li) => li.textContent === "almost"),
    { timeout },
    lane,
  );
  seen.tailKept = await page.$eval(tail, (pre) => pre.scrollTop);

  await page.waitForFunction(
    (wanted) => {
      const row = [...document.querySelectorAll("#recent tbody tr")].find((tr) => tr.textContent.startsWith(wanted + " "));
      return row && !document.querySelector(`.lane[data-issue="${wanted}"]`) ? row.dataset.outcome : false;
    },
    { timeout },
    key,
  );
  seen.outcome = await page.$eval("#recent tbody tr", (row) => row.dataset.outcome);
  seen.recentTitle = await page.$eval("#recent tbody tr .title", (node) => node.textContent);
  seen.steps.push("recent");
  await page.screenshot({ path: join(artifacts, "3-recent.png"), fullPage: true });

  // Nothing of the hostile title ran or became markup.
  seen.pwned = await page.evaluate(() => window.__pwned ?? null);
  seen.scripts = await page.$$eval("script", (nodes) => nodes.map((node) => node.getAttribute("src")));
  seen.images = await page.$$eval("img", (nodes) => nodes.length);
  seen.wide = await page.evaluate(() => document.documentElement.scrollWidth);

  // The run's page, from the recent runs' link (and the back button returns to the live page).
  await Promise.all([page.waitForNavigation(), page.click("#recent tbody tr td:last-child a")]);
  seen.runPage = await page.$eval("#outcome", (node) => node.textContent);
  seen.transcriptLines = await page.$$eval(".transcript li", (nodes) => nodes.length);
  seen.diffAdded = await page.$$eval("pre.diff .d-add", (nodes) => nodes.map((node) => node.textContent));
  seen.runPwned = await page.evaluate(() => window.__pwned ?? null);
  seen.runImages = await page.$$eval("img", (nodes) => nodes.length);
  seen.runWide = await page.evaluate(() => document.documentElement.scrollWidth);
  await page.screenshot({ path: join(artifacts, "4-run.png"), fullPage: true });
  await Promise.all([page.waitForNavigation(), page.goBack()]);
  seen.back = await page.$eval("#recent tbody tr", (row) => row.dataset.outcome);
} catch (error) {
  seen.error = String(error);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + "\n");
