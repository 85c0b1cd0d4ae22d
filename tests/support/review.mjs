// Reviews an issue's branch on a running `beflow watch --http`'s page, in a real headless Chromium, as a person would:
//
//   node review.mjs MODULES URL TOKEN KEY PATH LINE BODY ARTIFACTS
//
// The page is opened with its token link, then the page: the comment goes on line LINE of PATH (its number
// in the diff clicked), and the page shows it waiting, then — once the watch ran the review round — answered,
// without a reload. The page is also measured at a phone's width (390 px): no short token of a table broken, nothing
// wider than the window. It prints one JSON line of what it saw; a screenshot of each step goes to ARTIFACTS.
import { join } from "node:path";
import { brokenTokens, launch, watchedPage } from "./browser.mjs";

const [modules, url, token, key, path, line, body, artifacts] = process.argv.slice(2);

const timeout = 60_000;
const seen = { dialogs: [], pageerrors: [], steps: [] };

const browser = await launch(modules);
try {
  const page = await watchedPage(browser, seen);
  const shot = async (name) => {
    seen.steps.push(name);
    await page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });
  };
  await page.goto(`${url}/?token=${token}`, { waitUntil: "load" });
  await page.goto(`${url}/issues/${key}`, { waitUntil: "load" });
  await page.waitForFunction(() => document.getElementById("connection").textContent === "live", { timeout });
  seen.files = await page.$$eval("#review details.file", (nodes) => nodes.map((n) => n.dataset.path));
  seen.transcript = await page.$$eval("#review-transcript li", (nodes) => nodes.length);
  const at = `#review button.at[data-path="${path}"][data-line="${line}"]`;
  await page.waitForFunction((selector) => document.querySelector(selector), { timeout }, at);
  await page.evaluate((selector) => document.querySelector(selector).click(), at);
  seen.picked = await page.$eval("#review-form", (form) => [form.elements.path.value, form.elements.line.value]);
  await page.type("#review-form textarea[name=body]", body);
  await page.evaluate(() => document.querySelector("#review-form button[type=submit]").click());
  await page.waitForFunction(() => document.querySelector("#review .remark"), { timeout });
  seen.said = await page.$eval("#review-form .said", (node) => node.textContent);
  seen.cleared = await page.$eval("#review-form textarea", (node) => node.value);
  // Under the line it was given on: the row right after the line's own.
  seen.underItsLine = await page.evaluate(
    (p, l) => {
      const row = document.querySelector(`#review details.file[data-path="${p}"] tr[data-line="${l}"]`);
      return Boolean(row?.nextElementSibling?.querySelector(".remark"));
    },
    path,
    line,
  );
  seen.waiting = await page.$eval("#review .remark", (node) => node.querySelector(".pending")?.textContent ?? null);
  await shot("commented");
  // The watch runs the round; the page follows its events and shows the answer.
  await page.waitForFunction(() => document.querySelector("#review .remark[data-answered=yes]"), { timeout: 180_000 });
  seen.answer = await page.$eval("#review .remark .answer", (node) => node.textContent.trim());
  await shot("answered");
  await page.setViewport({ width: 390, height: 900 });
  await page.reload({ waitUntil: "load" });
  await page.waitForFunction(() => document.querySelector("#review .remark[data-answered=yes]"), { timeout });
  seen.layout = { broken: await page.evaluate(brokenTokens), width: await page.evaluate(() => document.documentElement.scrollWidth) };
  await shot("review-390");
} catch (error) {
  seen.error = String(error);
  const pages = await browser.pages();
  seen.debug = await pages[pages.length - 1].evaluate(() => document.getElementById("review")?.innerText ?? document.body.innerText).catch((e) => String(e));
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + "\n");
process.exit(0);
