// beflow's live pages. The home page: the watch's events (server-sent) trigger a fresh read of /api/v1/state,
// rendered with textContent only (no HTML from data, ever). A run's and an issue's page: an event of their run or
// issue triggers a fresh read of the page itself, whose part under #live replaces the shown one (the server's own
// rendering, Markdown sanitized there; no script in it runs). No build step, no library.
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
  // The end of a long line of the tail (its newest words), as the server says it (filters.newest).
  function newest(text, limit) {
    text = plain(text, text.length);
    return text.length > limit ? "…" + text.slice(text.length - limit) : text;
  }
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = plain(text);
    return node;
  }
  // A long value cut with a visible marker, the whole value one click away (as the server says it: filters.elide).
  function elided(text, keep) {
    text = plain(text);
    if (text.length <= keep) return document.createTextNode(text);
    var details = el("details", "elided"), summary = el("summary");
    summary.appendChild(document.createTextNode(text.slice(0, keep)));
    summary.appendChild(el("span", "more-marker", "… (" + num(text.length - keep) + " more characters: show all)"));
    details.appendChild(summary);
    details.appendChild(el("span", "whole", text));
    return details;
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
  // As the server says it (filters.used_line): the finished runs, then what the running lanes reported so far.
  function usedLine(state) {
    var parts = [], used = state.totals.used;
    if (used && used.runs) parts.push(totalsText(used));
    var tokens = 0, lanes = 0;
    state.lanes.forEach(function (lane) {
      if (lane.usage && lane.usage.tokens !== null && lane.usage.tokens !== undefined) { tokens += lane.usage.tokens; lanes += 1; }
    });
    if (lanes) parts.push(num(tokens) + " tokens so far in " + lanes + " running run" + (lanes !== 1 ? "s" : ""));
    return parts.join("; ");
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
  // Actions (http.actions): the server's own page acts with its cookie (set by the /?token=… link) or, without one,
  // the token asked once and kept for this tab; an answer that needs the token asks for it, then tries once more.
  // What an action said shows beside it (never an alert); the page reads itself again after it.
  function stored() { return sessionStorage.getItem("beflow-token") || ""; }
  function post(path, body, t) {
    var headers = { "Content-Type": "application/json" };
    if (t) headers.Authorization = "Bearer " + t;
    return fetch(path, { method: "POST", headers: headers, body: JSON.stringify(body || {}), credentials: "same-origin" });
  }
  function act(path, body) {
    return post(path, body, stored()).then(function (r) {
      if (r.status !== 401) return r;
      var t = window.prompt("This server's token (BEFLOW_HTTP_TOKEN, or the one beflow printed):") || "";
      if (!t) return r;
      sessionStorage.setItem("beflow-token", t);
      return post(path, body, t);
    }).then(function (r) {
      return r.json().then(function (answer) { return { ok: r.ok, answer: answer }; });
    }).catch(function () {
      return { ok: false, answer: { error: { message: "no answer from the server" } } };
    }).then(function (done) { schedule(); return done; });
  }
  function said(node, done) {
    if (!node) return;
    node.textContent = done.ok ? "done" : plain((done.answer.error || {}).message || "refused", 300);
    node.className = "said" + (done.ok ? " ok" : " bad");
  }
  function button(label, path, body, title) {
    var b = el("button", null, label);
    if (title) b.title = title;
    b.addEventListener("click", function () {
      b.disabled = true;
      act(path, body).then(function (done) { b.disabled = false; if (!done.ok) window.alert(plain(done.answer.error ? done.answer.error.message : "refused", 300)); });
    });
    return b;
  }
  // A form of the page (class "act", its data-path the action's): its fields as the action's JSON body — a
  // number field as a number, a checkbox as true or false, "labels" split at commas, an empty optional field left
  // out.
  function formBody(form) {
    var body = {};
    Array.prototype.forEach.call(form.elements, function (field) {
      if (!field.name) return;
      var value = field.value;
      if (field.name === "labels") body.labels = value.split(",").map(function (l) { return l.trim(); }).filter(Boolean);
      else if (field.type === "number") { if (value !== "") body[field.name] = Number(value); }
      else if (field.type === "checkbox") body[field.name] = field.checked;
      else if (value !== "" || field.required) body[field.name] = value;
    });
    return body;
  }
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.classList || !form.classList.contains("act")) return;
    event.preventDefault();
    var submit = form.querySelector("button");
    if (submit) submit.disabled = true;
    act(form.dataset.path, formBody(form)).then(function (done) {
      var out = form.querySelector(".said");
      said(out, done);
      if (submit) submit.disabled = false;
      if (done.ok && form.dataset.reset === "yes") form.reset();
      if (done.ok && done.answer.result && done.answer.result.key) form.dataset.done = done.answer.result.key;
    });
  });

  // The review: a line's number picks where the comment goes; "whole change" picks the change itself.
  document.addEventListener("click", function (event) {
    var target = event.target;
    var form = document.getElementById("review-form");
    if (!form || !target || !target.closest) return;
    var at = target.closest("button.at");
    if (at) {
      form.elements.path.value = at.dataset.path;
      form.elements.line.value = at.dataset.line;
      form.elements.body.focus();
    } else if (target.id === "review-whole") {
      form.elements.path.value = "";
      form.elements.line.value = "";
      form.elements.body.focus();
    }
  });

  // A lane's tail shows its newest lines (scrolled to its end) unless the reader scrolled up in it: then it stays
  // where they left it, across renders.
  function tailScrolls(box) {
    var kept = {};
    box.querySelectorAll(".lane").forEach(function (lane) {
      var pre = lane.querySelector(".tail");
      if (pre && pre.scrollTop + pre.clientHeight < pre.scrollHeight - 4) kept[lane.dataset.issue] = pre.scrollTop;
    });
    return kept;
  }
  function placeTails(box, kept) {
    box.querySelectorAll(".lane").forEach(function (lane) {
      var pre = lane.querySelector(".tail");
      if (!pre) return;
      var at = kept[lane.dataset.issue];
      pre.scrollTop = at === undefined ? pre.scrollHeight : at;
    });
  }
  function renderLanes(state) {
    var box = document.getElementById("lanes");
    var kept = tailScrolls(box);
    box.replaceChildren();
    if (!state.lanes.length) { box.appendChild(el("p", "empty", "Nothing running.")); }
    state.lanes.forEach(function (lane) {
      var art = el("article", "lane");
      art.dataset.issue = lane.issue; art.dataset.started = lane.started; art.dataset.run = lane.run || "";
      art.usage = lane.usage || {};  // (a usage event carries the figures it sends: merged into these)
      var h = el("h3"); h.appendChild(link("/issues/" + encodeURIComponent(lane.issue), lane.issue));
      h.appendChild(document.createTextNode(" ")); var title = el("span", "title"); title.appendChild(elided(lane.title, 300)); h.appendChild(title);
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
      lane.tail.forEach(function (line) { pre.appendChild(el("span", "k-" + line.kind, line.kind + ": " + newest(line.text, 300) + "\n")); });
      art.appendChild(pre);
      box.appendChild(art);
    });
    placeTails(box, kept);
    document.getElementById("running-count").textContent = state.totals.running + "/" + state.totals.concurrency;
  }
  function renderTable(id, rows, fill) {
    var body = document.querySelector("#" + id + " tbody");
    body.replaceChildren();
    rows.forEach(function (item) { var tr = el("tr"); fill(tr, item); body.appendChild(tr); });
    // An empty section says nothing: its table (and its heading, when it has one of its own) is hidden.
    var wrap = document.getElementById(id).closest(".section") || document.getElementById(id).closest(".scroll");
    wrap.hidden = rows.length === 0;
  }
  function renderHealth(state) {
    var h = state.health, dl = document.getElementById("health-list");
    dl.replaceChildren();
    function row(k, v, cls) { dl.appendChild(el("dt", null, k)); dl.appendChild(el("dd", cls, v)); }
    row("watch", h.live ? "running" : "none: this server shows the issues and the records");
    row("tracker", h.tracker + (h.tracker_reachable === null ? "" : h.tracker_reachable ? " · reachable" : " · errors"));
    if (h.rate_limit) row("rate limit", h.rate_limit.remaining + " left, resets " + when(h.rate_limit.reset));
    if (h.blocked) row("held back", h.blocked + (h.blocked_fix ? " — " + h.blocked_fix : ""), "bad");
    var b = state.totals.budget;
    if (b) row("day budget", b.spent.toFixed(2) + " of " + b.limit + " " + b.currency + (b.held ? " — held: " + (b.message || "") : ""), b.held ? "bad" : null);
    var used = usedLine(state);
    if (used) row("used", used);
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
    current = state;
    renderHealth(state);
    renderLanes(state);
    document.getElementById("queue-count").textContent = state.totals.queued;
    renderTable("queue", state.queue.slice(0, 50), function (tr, q) {
      tr.dataset.issue = q.issue;
      cell(tr, link("/issues/" + encodeURIComponent(q.issue), q.issue));
      var prio = cell(tr, String(q.priority), "token priority");
      if (actions) {
        var path = "/api/v1/issues/" + encodeURIComponent(q.issue) + "/priority";
        prio.appendChild(button("▲", path, { priority: Math.max(0, q.priority - 1) }, "sooner: priority " + Math.max(0, q.priority - 1)));
        prio.appendChild(button("▼", path, { priority: q.priority + 1 }, "later: priority " + (q.priority + 1)));
      }
      cell(tr, elided(q.title, 300));
      cell(tr, q.held ? holdText(q.held) : "", "held");
    });
    renderTable("held", state.held, function (tr, h) {
      tr.dataset.issue = h.issue;
      cell(tr, link("/issues/" + encodeURIComponent(h.issue), h.issue)); cell(tr, h.held.check, "token");
      cell(tr, holdText(h.held, true)); cell(tr, when(h.held.since), "token");
    });
    renderTable("backoffs", state.backoffs, function (tr, b) {
      tr.dataset.issue = b.issue;
      cell(tr, b.issue); cell(tr, b.attempt, "token"); cell(tr, when(b.due), "token"); var td = cell(tr, elided(b.reason, 300));
      if (actions) td.appendChild(button("retry now", "/api/v1/issues/" + encodeURIComponent(b.issue) + "/retry"));
    });
    renderTable("recent", state.recent, function (tr, r) {
      tr.dataset.run = r.id; tr.dataset.outcome = r.outcome;
      var first = cell(tr, r.issue + " "); var title = el("span", "title"); title.appendChild(elided(r.title, 120)); first.appendChild(title);
      cell(tr, r.outcome, "o-" + r.outcome + " token"); cell(tr, elided(r.reason || "", 200)); cell(tr, elided(r.branch || "-", 60));
      var pr = null;
      if (r.pull_request && /^https?:\/\//.test(r.pull_request)) { pr = link(r.pull_request, "PR"); pr.rel = "noreferrer noopener"; }
      cell(tr, pr || ""); cell(tr, seconds(r.duration), "token"); cell(tr, usageText(r.usage), "usage"); cell(tr, link("/runs/" + encodeURIComponent(r.id), r.id));
    });
    if (seen !== null) {
      // What lanes' events said since the read began is put back (the state may be older than the lane was).
      patched = patched.filter(function (p) { return p.id > Number(seen); });
      patched.forEach(function (p) { patch(p.event); });
      if (structural !== null && Number(seen) >= structural) structural = null;
      if (Number(seen) > Number(document.body.dataset.lastEvent || -1)) document.body.dataset.lastEvent = seen;
    }
    document.body.dataset.rendered = String(Date.now());
  }
  // The home page reads its state incrementally: what an event says of one lane — the agent's latest activity, a
  // progress line, its usage: nearly every event of busy lanes — goes into that lane at once, from the event itself;
  // only the events that change something else (a run started or ended, the queue, the health) read /api/v1/state
  // again. The lanes' transcript tails and the rest follow with one read every few seconds while agents talk.
  var LANE_EVENTS = { activity: true, usage: true, progress: true };
  var structural = null, patched = [], lazy = null, current = null;
  function laneOf(event) {
    var found = null;
    document.querySelectorAll("#lanes .lane").forEach(function (lane) {  // (no selector is built from data)
      if (lane.dataset.issue === event.issue && (!lane.dataset.run || lane.dataset.run === event.run)) found = lane;
    });
    return found;
  }
  function patch(event) {
    if (!event || !LANE_EVENTS[event.event]) return false;
    var lane = laneOf(event);
    if (!lane) return false;
    if (event.event === "activity") lane.querySelector(".latest").textContent = plain(event.latest);
    else if (event.event === "progress") {
      var list = lane.querySelector(".progress");  // (put back after a read: not twice when the read had it)
      if (!list.lastElementChild || list.lastElementChild.textContent !== plain(event.text)) list.appendChild(el("li", null, event.text));
    } else {
      ["context_used", "context_size", "tokens", "input_tokens", "output_tokens", "cost", "currency"].forEach(function (k) {
        if (event[k] !== undefined && event[k] !== null) lane.usage[k] = event[k];
      });
      var shown = lane.querySelector(".usage");
      if (!shown) { shown = el("p", "usage"); lane.insertBefore(shown, lane.querySelector(".latest")); }
      shown.textContent = usageText(lane.usage);
      // The health line's "used" sums the lanes': it says what the lane says.
      if (current) current.lanes.forEach(function (l) { if (l.issue === event.issue) l.usage = lane.usage; });
      if (current) renderHealth(current);
    }
    return true;
  }
  function arrived(id, event) {
    if (patch(event)) {
      patched.push({ id: Number(id), event: event });
      if (structural === null) document.body.dataset.lastEvent = id;
      if (!lazy) lazy = setTimeout(function () { lazy = null; schedule(); }, 3000);
      return;
    }
    if (structural === null) structural = Number(id);
    schedule();
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

  // A run's or an issue's page: read again when an event of its run or issue comes, and the part under #live
  // replaced by the new one (parsed inert: DOMParser runs no script, and the server sanitized what it rendered).
  var live = document.getElementById("live");
  // A run's page follows every event of its run. An issue's page, the events that change what it shows (not the
  // agent's activity, usage and progress, which come many a minute: each read of the page asks the tracker).
  function concerns(event) {
    if (!live || !event) return false;
    if (live.dataset.kind === "run") return event.run === live.dataset.run;
    return event.issue === live.dataset.issue && !LANE_EVENTS[event.event];
  }
  // At most one read a second: a burst of events is one read.
  var lastRead = 0, later = null;
  function reread() {
    if (inFlight) { pending = true; return; }
    var since = Date.now() - lastRead;
    if (since < 1000) { if (!later) later = setTimeout(function () { later = null; reread(); }, 1000 - since); return; }
    inFlight = true; pending = false; lastRead = Date.now();
    var seen = lastEvent;
    fetch(location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (!fresh) return;
        var y = window.scrollY;
        // Moving a field out of the page and back blurs it: the one being typed in gets its focus and caret back,
        // or the keys typed next would land nowhere (an answer cut short).
        var typing = document.activeElement, from = null, to = null;
        if (typing && typeof typing.selectionStart === "number") { from = typing.selectionStart; to = typing.selectionEnd; }
        // A form a person works in (an answer, a review comment, a new issue) is kept as it is — what they typed,
        // what it said back — while the fresh page still has it: the fresh page's copy is only where it goes.
        live.querySelectorAll("#review-comment, form.act[id]").forEach(function (kept) {
          var slot = fresh.querySelector("#" + kept.id);
          if (slot && slot !== kept) slot.replaceWith(kept);
        });
        live.replaceWith(document.adoptNode(fresh));
        live = fresh;
        if (typing && typing !== document.activeElement && document.contains(typing)) {
          typing.focus({ preventScroll: true });
          if (from !== null) { try { typing.setSelectionRange(from, to); } catch (e) { /* not a text field */ } }
        }
        window.scrollTo(0, y);
        if (seen !== null) document.body.dataset.lastEvent = seen;
        document.body.dataset.rendered = String(Date.now());
      })
      .catch(function () {})
      .then(function () { inFlight = false; if (pending) reread(); });
  }
  if (live) schedule = reread;

  // The event stream, reconnected by the page itself with a growing wait (1 s, 2 s, 4 s … 30 s at most, a little
  // random so that many pages do not come back at once), not the browser's retry every second: a server that is
  // gone is asked a few times a minute, not sixty.
  var connection = document.getElementById("connection");
  var home = document.getElementById("lanes");
  var wait = 1000, source = null, attempts = 0, lost = null, waits = [];
  function say(text, cls) { connection.textContent = text; connection.className = "connection" + (cls ? " " + cls : ""); }
  function stopped() {
    // The server (and the watch it served for) stopped answering: the page says so, not what it last saw.
    if (lost === null) lost = Date.now();
    var dd = document.querySelector("#health-list dd");
    if (home && dd) { dd.textContent = "stopped: no answer from the server since " + new Date(lost).toLocaleTimeString(); dd.className = "bad"; }
    document.body.dataset.stopped = "yes";
  }
  function connect() {
    attempts += 1;
    document.body.dataset.connects = String(attempts);
    source = new EventSource("/api/v1/events");
    source.onopen = function () {
      wait = 1000; lost = null; delete document.body.dataset.stopped;
      say("live", "live");
      schedule();
    };
    source.onmessage = function (message) {
      lastEvent = message.lastEventId;
      var event = null;
      try { event = JSON.parse(message.data); } catch (e) { event = null; }
      if (!live) { arrived(message.lastEventId, event); return; }
      if (concerns(event)) schedule();
    };
    source.onerror = function () {
      source.close();
      stopped();
      var delay = Math.min(wait, 30000) * (0.8 + Math.random() * 0.4);
      wait = Math.min(wait * 2, 30000);
      waits.push(Math.round(delay));
      document.body.dataset.waits = waits.slice(-10).join(" ");
      say("disconnected: trying again in " + Math.round(delay / 1000) + "s");
      setTimeout(connect, delay);
    };
  }
  if (window.EventSource && (home || live)) connect();
  if (home) placeTails(home, {});
  // Elapsed times move between events.
  setInterval(function () {
    document.querySelectorAll(".lane").forEach(function (lane) {
      var span = lane.querySelector(".elapsed");
      if (span) span.textContent = seconds(Date.now() / 1000 - Number(lane.dataset.started));
    });
  }, 1000);
})();
