// Reads beflow's pages as a person would, in a real headless Chromium (as dashboard.mjs does the live page):
//
//   node reading.mjs MODULES URL KEY RUN REVIEW ARTIFACTS
//
// At a phone's width (390 px) and a laptop's (1366 px) it opens the home page, the lists, issue KEY's page, run
// RUN's page and issue REVIEW's page (its branch's diff, its comments, the transcript beside it), and measures all
// their text: a short token (10 characters at most: "failed", "42s") whose glyphs are not on one line is broken. It records what of the hostile texts became markup, ran, or asked another origin
// for anything. Then it follows the test, step by step: it says a step's name on stdout and waits for a line on
// stdin (what the test did meanwhile) — the issue's page while a comment comes, the run's page while the run ends,
// the home page while the server stops. It prints one JSON line of what it saw; a screenshot of each page goes to
// ARTIFACTS.
import { join } from "node:path";
import { createInterface } from "node:readline";
import { brokenTokens, launch } from "./browser.mjs";

const [modules, url, key, run, review, artifacts] = process.argv.slice(2);

const timeout = 60_000;
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const step = async (name) => {
  process.stdout.write(`${name}\n`);
  await lines.next();
};
const seen = { dialogs: [], foreign: [], pageerrors: [], layout: {}, wide: {} };
const origin = new URL(url).origin;

// In the page: what of a hostile text became live markup.
const markup = () => ({
  pwned: window.__pwned ?? null,
  images: document.querySelectorAll("img, picture, image").length,
  frames: document.querySelectorAll("iframe, object, embed").length,
  scripts: [...document.querySelectorAll("script")].map((node) => node.getAttribute("src")),
  handlers: [...document.querySelectorAll("*")].filter((node) => [...node.attributes].some((a) => /^on/i.test(a.name))).length,
  styled: document.querySelectorAll("[style], style:not(head style)").length,
  scriptLinks: [...document.querySelectorAll("a[href]")].filter((a) => !/^(https?:|mailto:|\/|\?)/.test(a.getAttribute("href"))).map((a) => a.getAttribute("href")),
});

const browser = await launch(modules);
try {
  const page = await browser.newPage();
  page.on("dialog", async (dialog) => {
    seen.dialogs.push(dialog.message());
    await dialog.dismiss();
  });
  page.on("request", (request) => {
    const asked = request.url();
    if (!asked.startsWith("data:") && new URL(asked).origin !== origin) seen.foreign.push(asked);
  });
  page.on("pageerror", (error) => seen.pageerrors.push(String(error)));
  const paths = {
    home: "/",
    issues: "/issues",
    runs: "/runs",
    issue: `/issues/${key}`,
    run: `/runs/${run}`,
    review: `/issues/${review}`,
  };
  for (const width of [390, 1366]) {
    await page.setViewport({ width, height: 900 });
    for (const [name, path] of Object.entries(paths)) {
      await page.goto(url + path, { waitUntil: "load" });
      if (name === "home") await page.waitForFunction(() => document.body.dataset.rendered, { timeout });
      seen.layout[`${name}@${width}`] = await page.evaluate(brokenTokens);
      seen.wide[`${name}@${width}`] = await page.evaluate(() => document.documentElement.scrollWidth);
      seen[`markup:${name}@${width}`] = await page.evaluate(markup);
      if (name === "review") {
        // (its run kept no transcript: the section is left out, not shown empty)
        seen.review = await page.evaluate(() => ({
          files: document.querySelectorAll("details.file").length,
          remarks: document.querySelectorAll(".remark").length,
          transcript: document.getElementById("review-transcript") !== null,
        }));
      }
      await page.screenshot({ path: join(artifacts, `${name}-${width}.png`), fullPage: true });
    }
  }

  // The issue's page: its Markdown, then a comment that comes while it is open.
  await page.goto(url + paths.issue, { waitUntil: "load" });
  await page.waitForFunction(() => document.getElementById("connection").textContent === "live", { timeout });
  seen.issue = await page.evaluate(() => ({
    heading: document.querySelector("#issue-body h1")?.textContent ?? null,
    strong: document.querySelector("#issue-body strong")?.textContent ?? null,
    link: document.querySelector('#issue-body a[href="https://example.org/page"]')?.rel ?? null,
    placeholders: [...document.querySelectorAll(".image-placeholder")].map((node) => node.textContent),
    body: document.getElementById("issue-body").textContent,
    comments: [...document.querySelectorAll(".comment")].map((node) => node.textContent),
  }));
  await step("issue-open");
  await page.waitForFunction(() => document.querySelectorAll(".comment").length === 2, { timeout });
  seen.issueLive = await page.evaluate(() => ({
    comment: document.querySelectorAll(".comment")[1].querySelector("em")?.textContent ?? null,
    status: document.querySelector("#issue-meta .status").textContent,
  }));
  seen["markup:issue-live"] = await page.evaluate(markup);

  // The run's page: its fields in words, then the run ends while it is open.
  await page.goto(url + paths.run, { waitUntil: "load" });
  await page.waitForFunction(() => document.getElementById("connection").textContent === "live", { timeout });
  seen.run = await page.evaluate(() => ({
    labels: [...document.querySelectorAll(".record dt")].map((node) => node.textContent),
    values: Object.fromEntries([...document.querySelectorAll(".record dt")].map((dt) => [dt.dataset.field, dt.nextElementSibling.textContent])),
    elided: [...document.querySelectorAll(".record details.elided")].map((node) => node.querySelector(".more-marker").textContent),
    agent: [...document.querySelectorAll(".transcript li.k-agent .text")].map((node) => node.textContent),
  }));
  // The whole of an elided value, on demand.
  await page.$eval(".record details.elided summary", (node) => node.click());
  seen.run.whole = await page.$eval(".record details.elided[open] .whole", (node) => node.textContent);
  await step("run-open");
  await page.waitForFunction(() => document.getElementById("live").dataset.outcome === "failed", { timeout });
  seen.runLive = await page.$eval("#outcome", (node) => node.textContent);
  seen["markup:run-live"] = await page.evaluate(markup);

  // The home page: empty sections hidden; then the server stops.
  await page.goto(url + "/", { waitUntil: "load" });
  await page.waitForFunction(() => document.getElementById("connection").textContent === "live", { timeout });
  seen.home = await page.evaluate(() => ({
    hidden: Object.fromEntries(["queue", "held", "backoffs", "recent"].map((id) => {
      const table = document.getElementById(id);
      return [id, table.offsetParent === null];
    })),
    watch: document.querySelector("#health-list dd").textContent,
  }));
  await step("home-open");
  await page.waitForFunction(() => Number(document.body.dataset.connects) >= 4, { timeout });
  seen.stopped = await page.evaluate(() => ({
    watch: document.querySelector("#health-list dd").textContent,
    stopped: document.body.dataset.stopped ?? null,
    connects: Number(document.body.dataset.connects),
    waits: document.body.dataset.waits.split(" ").map(Number),
    connection: document.getElementById("connection").textContent,
  }));
  seen["markup:home-stopped"] = await page.evaluate(markup);
} catch (error) {
  seen.error = String(error);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + "\n");
process.exit(0);
