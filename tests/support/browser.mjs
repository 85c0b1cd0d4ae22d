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

// In the page (page.evaluate): the short tokens of table cells whose glyphs are on more than one line.
export const brokenTokens = () => {
  const broken = [];
  for (const cell of document.querySelectorAll("table td, table th")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.data.matchAll(/\S+/g)) {
        if (match[0].length > 10) continue;
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(match[0]);
      }
    }
  }
  return broken;
};
