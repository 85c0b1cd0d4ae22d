// Drives the list pages of beflow's server (/issues, /runs) in a real headless Chromium, as dashboard.mjs does the
// live page:
//
//   node lists.mjs MODULES URL ARTIFACTS
//
// From the home page it follows the header's links to the issues and the runs, pages through each by their
// links (5 issues, 4 runs a page), filters the issues by status, goes back, and prints one JSON line of what each
// page showed; a screenshot of each list goes to ARTIFACTS.
import { join } from "node:path";
import { launch } from "./browser.mjs";

const [modules, url, artifacts] = process.argv.slice(2);

const seen = {};
const browser = await launch(modules);
const rows = (page, table, key) =>
  page.$$eval(`#${table} tbody tr[data-${key}]`, (trs, name) => trs.map((tr) => tr.dataset[name]), key);
const follow = (page, selector) => Promise.all([page.waitForNavigation(), page.click(selector)]);
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 390, height: 844 }); // a phone
  page.on("pageerror", (error) => (seen.pageerror = String(error)));
  await page.goto(url, { waitUntil: "load" });

  await follow(page, "#nav-issues");
  seen.issuesAll = await rows(page, "issues", "issue");
  seen.issuesNext = await page.$("#pager a[rel=next]") !== null;
  await page.goto(url + "/issues?per_page=5", { waitUntil: "load" });
  seen.issuePages = [await rows(page, "issues", "issue")];
  await page.screenshot({ path: join(artifacts, "issues-1.png"), fullPage: true });
  while (await page.$("#pager a[rel=next]")) {
    await follow(page, "#pager a[rel=next]");
    seen.issuePages.push(await rows(page, "issues", "issue"));
  }
  seen.issuesPager = await page.$eval("#pager", (node) => node.textContent);
  await follow(page, "#status-filter a:nth-of-type(3)"); // all, open, ready: "ready"
  seen.readyStatuses = await page.$$eval("#issues tbody tr td:nth-child(2)", (tds) => tds.map((td) => td.textContent));
  await Promise.all([page.waitForNavigation(), page.goBack()]);
  seen.back = await rows(page, "issues", "issue");

  await follow(page, "#nav-runs");
  seen.runsAll = await rows(page, "runs", "run");
  await page.goto(url + "/runs?per_page=4", { waitUntil: "load" });
  seen.runPages = [await rows(page, "runs", "run")];
  await page.screenshot({ path: join(artifacts, "runs-1.png"), fullPage: true });
  while (await page.$("#pager a[rel=next]")) {
    await follow(page, "#pager a[rel=next]");
    seen.runPages.push(await rows(page, "runs", "run"));
  }
  await follow(page, "#runs tbody tr td:nth-child(2) a"); // the runs of that row's issue
  seen.runsOfIssue = await page.$$eval("#runs tbody tr td:nth-child(2) a", (as) => as.map((a) => a.textContent));
  seen.wide = await page.evaluate(() => document.documentElement.scrollWidth);
} catch (error) {
  seen.error = String(error);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + "\n");
