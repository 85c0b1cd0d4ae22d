// What the tests' page drivers share: the packaged headless Chromium they drive, and the layout check they run in
// the page.
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

// @sparticuz/chromium's browser, driven by puppeteer-core, both from the node_modules directory MODULES (the
// suite's tools/browser). `sameOrigin`: keep the same-origin policy, which @sparticuz/chromium's defaults turn off
// (--disable-web-security) — a test of CORS needs it on.
export async function launch(modules, { sameOrigin = false } = {}) {
  const require = createRequire(join(modules, "package.json"));
  const load = async (name) => (await import(pathToFileURL(require.resolve(name)).href)).default;
  const chromium = await load("@sparticuz/chromium");
  const puppeteer = await load("puppeteer-core");
  const args = sameOrigin ? chromium.args.filter((arg) => arg !== "--disable-web-security") : chromium.args;
  return puppeteer.launch({
    executablePath: await chromium.executablePath(),
    args: [...args, "--no-sandbox"],
    headless: true,
  });
}

// A new page at a laptop's width as a person has it open: its dialogs dismissed and its script errors noted, each in
// `seen` (`dialogs`, `pageerrors`).
export async function watchedPage(browser, seen) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1366, height: 900 });
  page.on("dialog", async (dialog) => {
    seen.dialogs.push(dialog.message());
    await dialog.dismiss();
  });
  page.on("pageerror", (error) => seen.pageerrors.push(String(error)));
  return page;
}

// In the page (page.evaluate): the short tokens (10 characters at most: "failed", "42s", "4/2") of any text the page
// shows — a table's cells, a definition, a heading, a lane, a form — whose glyphs are on more than one line. A break
// after a hyphen, after a closing bracket, or after a slash before a letter, is one between words ("acp-" / "test",
// "}" / "</style>", "and/" / "or"), where a browser breaks a line anyway; "failed" and "4/2" must stay whole.
export const brokenTokens = () => {
  const broken = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("script, style")) continue;
    for (const word of node.data.matchAll(/\S+/g)) {
      if (word[0].length > 10) continue; // (a long word breaks where it must)
      for (const part of word[0].matchAll(/(?:[^\-/)\]}]|\/(?![A-Za-z]))+(?:-|\/(?=[A-Za-z])|[)\]}]+)?|[)\]}]+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index + part.index);
        range.setEnd(node, word.index + part.index + part[0].length);
        const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(word[0]);
      }
    }
  }
  return broken;
};
