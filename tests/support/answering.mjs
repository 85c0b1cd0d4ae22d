// Answers a blocked issue's question from its page, in a real headless Chromium, as a person would:
//
//   node answering.mjs MODULES URL TOKEN KEY ANSWER
//
// The page is opened with its token link (the token becomes its cookie); on the page the question and its
// choices are read, the answer typed into its box and sent. It prints one JSON line of what it saw.
import { launch, watchedPage } from "./browser.mjs";

const [modules, url, token, key, answer] = process.argv.slice(2);

const timeout = 60_000;
const seen = { dialogs: [], pageerrors: [] };
const browser = await launch(modules);
try {
  const page = await watchedPage(browser, seen);
  await page.goto(`${url}/?token=${token}`, { waitUntil: "load" });
  await page.goto(`${url}/issues/${encodeURIComponent(key)}`, { waitUntil: "load" });
  await page.waitForSelector("#question #answer textarea", { timeout });
  seen.question = await page.$eval("#question blockquote", (node) => node.textContent);
  seen.choices = await page.$$eval("#question .choices li", (nodes) => nodes.map((node) => node.textContent));
  await page.type("#answer textarea[name=text]", answer);
  await page.evaluate(() => document.querySelector("#answer button[type=submit]").click());
  await page.waitForFunction(() => document.querySelector("#answer .said").textContent !== "", { timeout });
  seen.said = await page.$eval("#answer .said", (node) => node.textContent);
} catch (error) {
  seen.error = String(error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
