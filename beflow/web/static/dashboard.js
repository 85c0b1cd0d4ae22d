// beflow's live page: the watch's events (server-sent) trigger a fresh read of /api/v1/state, rendered with
// textContent only (no HTML from data, ever). No build step, no library.
(function () {
  "use strict";
  var actions = document.body.dataset.actions === "on";
  var pending = false, inFlight = false, lastEvent = null;

  // Text from data as the server renders it (filters.plain): terminal escapes and control characters removed, a huge
  // text cut. It is then set as textContent: never parsed as HTML.
  var ANSI = /\x1b(?:\[[0-?]*[ -\/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])/g;
  var CONTROL = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;
  var MAX_TEXT = 4000;
  function plain(value, limit) {
    var text = String(value).replace(ANSI, "").replace(CONTROL, "");
    limit = limit || MAX_TEXT;
    return text.length > limit ? text.slice(0, limit) + "… [" + (text.length - limit) + " more characters]" : text;
  }
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = plain(text);
    return node;
  }
  function link(href, text) { var a = el("a", null, text); a.setAttribute("href", href); return a; }
  function seconds(v) {
    if (v === null || v === undefined) return "-";
    v = Math.max(0, v);
    if (v < 120) return Math.round(v) + "s";
    if (v < 7200) return Math.round(v / 60) + "m";
    return (v / 3600).toFixed(1) + "h";
  }
  // What the agent reported, as the server says it (filters.usage_text): nothing estimated.
  function num(n) { return Number(n).toLocaleString("en-US"); }
  function usageText(u) {
    if (!u) return "";
    var parts = [];
    if (u.context_used !== null && u.context_used !== undefined) parts.push("context " + num(u.context_used) + (u.context_size ? "/" + num(u.context_size) : ""));
    if (u.tokens !== null && u.tokens !== undefined) parts.push(num(u.tokens) + " tokens");
    if (u.cost !== null && u.cost !== undefined) parts.push((u.cost.toFixed(2) + " " + (u.currency || "")).trim());
    return parts.join(" · ");
  }
  function totalsText(t) {
    var parts = t.reported ? [num(t.tokens) + " tokens"] : [];
    Object.keys(t.cost).sort().forEach(function (c) { parts.push(t.cost[c].toFixed(2) + " " + c); });
    return (parts.length ? parts.join(", ") : "no usage reported") + " over " + t.runs + " run" + (t.runs !== 1 ? "s" : "");
  }
  function holdText(h, bare) {
    var text = plain(h.message, 300) + (h.fix ? " — " + plain(h.fix, 300) : "");
    return bare ? text : h.check + ": " + text;
  }
  function when(t) { return t ? new Date(t * 1000).toLocaleTimeString() : "-"; }
  function cell(row, content, cls) {
    var td = el("td", cls);
    if (content instanceof Node) td.appendChild(content); else td.textContent = content === null ? "" : plain(content);
    row.appendChild(td);
    return td;
  }
  function token() {
    var t = sessionStorage.getItem("beflow-token");
    if (!t) { t = window.prompt("This server's token (BEFLOW_HTTP_TOKEN, or the one beflow printed):") || ""; if (t) sessionStorage.setItem("beflow-token", t); }
    return t;
  }
  function act(path, body) {
    var headers = { "Content-Type": "application/json" };
    var t = token(); if (t) headers.Authorization = "Bearer " + t;
    fetch(path, { method: "POST", headers: headers, body: JSON.stringify(body || {}), credentials: "same-origin" })
      .then(function (r) { if (!r.ok) r.json().then(function (p) { window.alert(p.error ? p.error.message : r.status); }); schedule(); });
  }
  function button(label, path, body) {
    var b = el("button", null, label);
    b.addEventListener("click", function () { act(path, body); });
    return b;
  }

  function renderLanes(state) {
    var box = document.getElementById("lanes");
    box.replaceChildren();
    if (!state.lanes.length) { box.appendChild(el("p", "empty", "Nothing running.")); }
    state.lanes.forEach(function (lane) {
      var art = el("article", "lane");
      art.dataset.issue = lane.issue; art.dataset.started = lane.started;
      var h = el("h3"); h.appendChild(link("/issues/" + encodeURIComponent(lane.issue), lane.issue));
      h.appendChild(document.createTextNode(" ")); h.appendChild(el("span", "title", plain(lane.title, 300)));
      art.appendChild(h);
      var meta = el("p", "meta", (lane.round ? "round " + lane.round + ", " : "") + "attempt " + lane.attempt + " · ");
      meta.appendChild(el("span", "elapsed", seconds(lane.elapsed)));
      if (lane.run) { meta.appendChild(document.createTextNode(" · ")); meta.appendChild(link("/runs/" + encodeURIComponent(lane.run), lane.run)); }
      if (lane.cancelling) meta.appendChild(document.createTextNode(" · cancelling: " + (lane.reason || "")));
      if (actions && lane.run && !lane.cancelling) meta.appendChild(button("cancel", "/api/v1/runs/" + encodeURIComponent(lane.run) + "/cancel"));
      art.appendChild(meta);
      if (lane.usage) art.appendChild(el("p", "usage", usageText(lane.usage)));
      art.appendChild(el("p", "latest", lane.latest));
      var ul = el("ul", "progress");
      lane.progress.forEach(function (p) { ul.appendChild(el("li", null, p)); });
      art.appendChild(ul);
      var pre = el("pre", "tail");
      lane.tail.forEach(function (line) { pre.appendChild(el("span", "k-" + line.kind, line.kind + ": " + line.text.slice(0, 300) + "\n")); });
      art.appendChild(pre);
      box.appendChild(art);
    });
    document.getElementById("running-count").textContent = state.totals.running + "/" + state.totals.concurrency;
  }
  function renderTable(id, rows, fill) {
    var body = document.querySelector("#" + id + " tbody");
    body.replaceChildren();
    rows.forEach(function (item) { var tr = el("tr"); fill(tr, item); body.appendChild(tr); });
  }
  function renderHealth(state) {
    var h = state.health, dl = document.getElementById("health-list");
    dl.replaceChildren();
    function row(k, v, cls) { dl.appendChild(el("dt", null, k)); dl.appendChild(el("dd", cls, v)); }
    row("watch", h.live ? "running" : "not running (beflow serve)");
    row("tracker", h.tracker + (h.tracker_reachable === null ? "" : h.tracker_reachable ? " · reachable" : " · errors"));
    if (h.rate_limit) row("rate limit", h.rate_limit.remaining + " left, resets " + when(h.rate_limit.reset));
    if (h.blocked) row("held back", h.blocked + (h.blocked_fix ? " — " + h.blocked_fix : ""), "bad");
    var b = state.totals.budget;
    if (b) row("day budget", b.spent.toFixed(2) + " of " + b.limit + " " + b.currency + (b.held ? " — held: " + (b.message || "") : ""), b.held ? "bad" : null);
    if (state.totals.used) row("used", totalsText(state.totals.used));
    if (h.config_reloaded) row("config", "reloaded " + when(h.config_reloaded));
    var w = h.webhooks, refused = Object.keys(w.refused).sort().map(function (k) { return k + " " + w.refused[k]; });
    if (w.woke || w.ignored || refused.length) {
      row("webhooks", w.woke + " woke the watch, " + w.ignored + " ignored" + (refused.length ? ", refused: " + refused.join(", ") : ""), refused.length ? "bad" : null);
    }
    var errors = document.getElementById("errors");
    errors.replaceChildren();
    h.errors.forEach(function (e) { errors.appendChild(el("li", null, e)); });
  }
  function render(state, seen) {
    renderHealth(state);
    renderLanes(state);
    document.getElementById("queue-count").textContent = state.totals.queued;
    renderTable("queue", state.queue.slice(0, 50), function (tr, q) {
      tr.dataset.issue = q.issue;
      cell(tr, link("/issues/" + encodeURIComponent(q.issue), q.issue)); cell(tr, q.priority); cell(tr, q.title.slice(0, 300));
      cell(tr, q.held ? holdText(q.held) : "", "held");
    });
    renderTable("held", state.held, function (tr, h) {
      tr.dataset.issue = h.issue;
      cell(tr, link("/issues/" + encodeURIComponent(h.issue), h.issue)); cell(tr, h.held.check);
      cell(tr, holdText(h.held, true)); cell(tr, when(h.held.since));
    });
    renderTable("backoffs", state.backoffs, function (tr, b) {
      tr.dataset.issue = b.issue;
      cell(tr, b.issue); cell(tr, b.attempt); cell(tr, when(b.due)); var td = cell(tr, b.reason.slice(0, 300));
      if (actions) td.appendChild(button("retry now", "/api/v1/issues/" + encodeURIComponent(b.issue) + "/retry"));
    });
    renderTable("recent", state.recent, function (tr, r) {
      tr.dataset.run = r.id; tr.dataset.outcome = r.outcome;
      var first = cell(tr, r.issue + " "); first.appendChild(el("span", "title", plain(r.title, 120)));
      cell(tr, r.outcome, "o-" + r.outcome); cell(tr, (r.reason || "").slice(0, 200)); cell(tr, r.branch || "-");
      var pr = null;
      if (r.pull_request && /^https?:\/\//.test(r.pull_request)) { pr = link(r.pull_request, "PR"); pr.rel = "noreferrer noopener"; }
      cell(tr, pr || ""); cell(tr, seconds(r.duration)); cell(tr, usageText(r.usage), "usage"); cell(tr, link("/runs/" + encodeURIComponent(r.id), r.id));
    });
    if (seen !== null) document.body.dataset.lastEvent = seen;
    document.body.dataset.rendered = String(Date.now());
  }
  function refresh() {
    if (inFlight) { pending = true; return; }
    inFlight = true; pending = false;
    var seen = lastEvent;
    fetch("/api/v1/state", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (state) { if (state) render(state, seen); })
      .catch(function () {})
      .then(function () { inFlight = false; if (pending) refresh(); });
  }
  function schedule() { refresh(); }

  var connection = document.getElementById("connection");
  if (window.EventSource && document.getElementById("lanes")) {
    var source = new EventSource("/api/v1/events");
    source.onopen = function () { connection.textContent = "live"; connection.className = "connection live"; refresh(); };
    source.onerror = function () { connection.textContent = "reconnecting…"; connection.className = "connection"; };
    source.onmessage = function (message) { lastEvent = message.lastEventId; schedule(); };
  }
  // Elapsed times move between events.
  setInterval(function () {
    document.querySelectorAll(".lane").forEach(function (lane) {
      var span = lane.querySelector(".elapsed");
      if (span) span.textContent = seconds(Date.now() / 1000 - Number(lane.dataset.started));
    });
  }, 1000);
})();
