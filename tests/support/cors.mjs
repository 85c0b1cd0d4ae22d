// What a page of another origin may do with beflow's API, in a real headless Chromium (CORS is the browser's to
// enforce):
//
//   node cors.mjs MODULES PAGE_URL SERVER_URL TOKEN ISSUE
//
// It opens PAGE_URL (a page of another origin), and from it reads the server's state, opens its event stream,
// sets issue ISSUE's status without the token and then with it (as a bearer token), and prints one JSON line of
// what each gave: a status, or the error the browser raised when CORS did not let the page read.
import { launch } from "./browser.mjs";

const [modules, pageUrl, server, token, issue] = process.argv.slice(2);
const browser = await launch(modules, { sameOrigin: true });
let seen = {};
try {
  const page = await browser.newPage();
  await page.goto(pageUrl, { waitUntil: "load" });
  seen = await page.evaluate(
    async (server, token, issue) => {
      const tried = async (request) => {
        try {
          const answer = await request();
          return answer.status;
        } catch (error) {
          return String(error.name);
        }
      };
      const body = JSON.stringify({ status: "open", note: "from another origin" });
      const json = { "Content-Type": "application/json" };
      const stream = await new Promise((resolve) => {
        const source = new EventSource(server + "/api/v1/events");
        source.onopen = () => { source.close(); resolve("open"); };
        source.onerror = () => { source.close(); resolve("error"); };
      });
      return {
        origin: window.location.origin,
        state: await tried(() => fetch(server + "/api/v1/state")),
        stream,
        withCookies: await tried(() => fetch(server + "/api/v1/state", { credentials: "include" })),
        noToken: await tried(() => fetch(server + `/api/v1/issues/${issue}/status`, { method: "POST", headers: json, body })),
        withToken: await tried(() =>
          fetch(server + `/api/v1/issues/${issue}/status`, {
            method: "POST",
            headers: { ...json, Authorization: `Bearer ${token}` },
            body,
          }),
        ),
      };
    },
    server,
    token,
    issue,
  );
} catch (error) {
  seen.error = String(error);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + "\n");
