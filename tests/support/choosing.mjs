// Chooses a best-of-N candidate on its issue's page, in a real headless Chromium, as a person would:
//
//   node choosing.mjs MODULES URL TOKEN KEY CANDIDATE
//
// The page is opened with its token link (the token becomes its cookie); on the issue's page the candidates' columns
// are read (number and checks), a file of a diff opened, the candidate picked with "anyway" ticked and sent. It
// prints one JSON line of what it saw.
import { launch, watchedPage } from "./browser.mjs";

const [modules, url, token, key, candidate] = process.argv.slice(2);

const timeout = 60_000;
const seen = { dialogs: [], pageerrors: [] };
const browser = await launch(modules);
try {
  const page = await watchedPage(browser, seen);
  await page.goto(`${url}/?token=${token}`, { waitUntil: "load" });
  await page.goto(`${url}/issues/${encodeURIComponent(key)}`, { waitUntil: "load" });
  await page.waitForSelector("#candidates #confirm select", { timeout });
  seen.columns = await page.$$eval("#candidates article.candidate", (nodes) =>
    nodes.map((node) => [`c${node.dataset.candidate}`, node.querySelector("dd.checks").textContent]),
  );
  seen.files = await page.$$eval("#candidates details.file", (nodes) => nodes.length);
  await page.select("#confirm select[name=candidate]", candidate);
  await page.click("#confirm input[name=anyway]");
  await page.evaluate(() => document.querySelector("#confirm button[type=submit]").click());
  await page.waitForFunction(() => document.querySelector("#confirm .said").textContent !== "", { timeout });
  seen.said = await page.$eval("#confirm .said", (node) => node.textContent);
} catch (error) {
  seen.error = String(error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
