// Event -> DOM latency of beflow's live page, in a real headless Chromium (tools/browser).
//
//   node dashboard_latency.mjs MODULES URL COUNT
//
// Says `ready` once the page is live, then records, for each event the watch emits (its `time`, taken in the watch
// process), when the page's DOM first showed the state after it (the page sets body[data-last-event] once it has
// rendered, or once it put a lane's event into its lane). Prints the latencies in milliseconds as JSON after COUNT events, or when stdin closes.
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, url, count] = process.argv.slice(2);
const require = createRequire(join(modules, "package.json"));
const load = async (name) => (await import(pathToFileURL(require.resolve(name)).href)).default;
const chromium = await load("@sparticuz/chromium");
const puppeteer = await load("puppeteer-core");
const browser = await puppeteer.launch({
  executablePath: await chromium.executablePath(),
  args: [...chromium.args, "--no-sandbox"],
  headless: true,
});
const page = await browser.newPage();
await page.goto(url, { waitUntil: "load" });
await page.waitForFunction(() => document.getElementById("connection").textContent === "live", { timeout: 60_000 });
await page.evaluate(() => {
  window.__events = {};
  window.__latencies = [];
  const counted = new Set();
  const count = (id, time, now) => {
    if (counted.has(id)) return;
    counted.add(id);
    window.__latencies.push(now - time);
  };
  // This stream is a connection of its own: the page may show an event before this one hears of it (the page
  // puts a lane's event in at once). Such an event is counted when it arrives here: an upper bound of its latency.
  const source = new EventSource("/api/v1/events");
  source.onmessage = (message) => {
    const time = JSON.parse(message.data).time * 1000;
    window.__events[message.lastEventId] = time;
    if (Number(message.lastEventId) <= Number(document.body.dataset.lastEvent)) count(message.lastEventId, time, Date.now());
  };
  new MutationObserver(() => {
    const now = Date.now();
    const shown = Number(document.body.dataset.lastEvent);
    for (const [id, time] of Object.entries(window.__events)) {
      if (Number(id) <= shown) count(id, time, now);
    }
  }).observe(document.body, { attributes: true, attributeFilter: ["data-last-event"] });
});
process.stdout.write("ready\n");
let stop = false;
process.stdin.on("end", () => { stop = true; });
process.stdin.resume();
while (!stop) {
  const seen = await page.evaluate(() => window.__latencies.length);
  if (seen >= Number(count)) break;
  await new Promise((resolve) => setTimeout(resolve, 100)); // polling the page's counter, not a wait for time
}
const latencies = await page.evaluate(() => window.__latencies);
await browser.close();
process.stdout.write(JSON.stringify(latencies) + "\n");
