// mcp-reconciler operator console: plain JavaScript, no framework, no build step, no CDN.
//
// Security model (adr/0021-operator-console.md):
// - The bearer token lives in sessionStorage (this tab only) and travels only in the
//   Authorization header of fetch() calls; it is never put in a URL, a cookie or the DOM.
// - The event stream is read with fetch() streaming, because EventSource cannot send headers.
// - Nothing from the server is parsed as HTML: every value is set with textContent.
// - The page loads only same-origin scripts and styles (CSP without unsafe-inline).
"use strict";

const TOKEN_KEY = "mcp-reconciler.console.token";
const SVG_NS = "http://www.w3.org/2000/svg";
const MAX_LOG = 60;

const state = {
  token: null,
  role: null,
  status: null,
  generations: null,
  sessions: null,
  catalog: null,
  approvals: null, // GET /v1/approvals: pending first (re-read every two seconds: not events)
  open: new Set(), // keys of the folded lists the operator opened: re-renders keep them open
  history: new Map(), // revision -> {revision, published_at, trigger, closed_at, forced, superseded_at}
  lastEventId: null,
  stream: null, // AbortController of the event stream
  refreshTimer: null,
};

// -- small DOM helpers --------------------------------------------------------------------------

function $(id) { return document.getElementById(id); }

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "class") node.className = value;
    else if (key === "title") node.title = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function badge(text) { return el("span", { class: "badge " + text }, text); }

function clock(t) {
  if (t === null || t === undefined) return "—";
  return new Date(t * 1000).toLocaleTimeString([], { hour12: false });
}

function duration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

function ago(t) { return t ? duration(Date.now() / 1000 - t) + " ago" : "—"; }
function until(t) { return t ? "in " + duration(t - Date.now() / 1000) : "—"; }

const REASONS = {
  startup: "gateway start",
  config: "config file changed",
  watched_file: "watched file changed",
  list_changed: "upstream list_changed",
  reconnect: "upstream reconnect",
  refresh: "refresh requested",
  poll: "periodic poll",
  retry: "retry of a failed cycle",
};

const SHORT = { startup: "start", watched_file: "watched file", list_changed: "list_changed" };

function whyShort(trigger) {
  if (!trigger || !trigger.reasons || trigger.reasons.length === 0) return "—";
  return trigger.reasons.map((r) => SHORT[r] || r).join(", ");
}

function why(trigger) {
  if (!trigger || !trigger.reasons || trigger.reasons.length === 0) return "—";
  const reasons = trigger.reasons.map((r) => REASONS[r] || r).join(", ");
  const keys = (trigger.keys || []).filter((k) => k !== "all");
  return keys.length ? reasons + " (" + keys.join(", ") + ")" : reasons;
}

function replaceRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// -- the control API ----------------------------------------------------------------------------

class Unauthorized extends Error {}

async function api(path, options) {
  const init = Object.assign({ cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" }, options || {});
  init.headers = Object.assign({ Authorization: "Bearer " + state.token, Accept: "application/json" }, init.headers || {});
  const response = await fetch(path, init);
  if (response.status === 401) throw new Unauthorized("the token was not accepted");
  const body = response.status === 204 ? null : await response.json();
  if (!response.ok) {
    const message = body && body.error ? body.error.code + ": " + body.error.message : "HTTP " + response.status;
    throw new Error(message);
  }
  return body;
}

// -- login --------------------------------------------------------------------------------------

function showLogin(message) {
  stopStream();
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("who").textContent = "";
  $("session-token").textContent = ""; // a new session's token is shown once, never kept
  $("session-answer").textContent = "";
  state.catalog = null;
  $("login-error").textContent = message || "";
  setLive(false);
}

async function login(token) {
  state.token = token;
  try {
    await api("/v1/status");
  } catch (err) {
    showLogin(err instanceof Unauthorized ? "That token was not accepted." : "The gateway did not answer: " + err.message);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  state.history.clear();
  state.lastEventId = 0; // replay what the gateway still keeps: recent history for the timeline
  await refresh();
  startStream();
}

// -- data ---------------------------------------------------------------------------------------

async function refresh() {
  try {
    const [status, generations] = await Promise.all([api("/v1/status"), api("/v1/generations")]);
    state.status = status;
    state.generations = generations;
    for (const g of generations.generations) remember(g.revision, { published_at: g.published_at, trigger: g.trigger });
    try {
      state.approvals = await api("/v1/approvals");
    } catch (err) {
      state.approvals = null;
    }
    if (state.role !== "owner") {
      try {
        state.sessions = await api("/v1/sessions");
      } catch (err) {
        state.sessions = null;
      }
      try {
        state.catalog = status.revision === null ? null : await api("/v1/catalog");
      } catch (err) {
        state.catalog = null;
      }
    }
    render();
  } catch (err) {
    if (err instanceof Unauthorized) showLogin("The token is no longer accepted.");
  }
}

function scheduleRefresh() {
  if (state.refreshTimer !== null) return;
  state.refreshTimer = setTimeout(() => {
    state.refreshTimer = null;
    refresh();
  }, 60);
}

function remember(revision, fields) {
  const known = state.history.get(revision) || { revision };
  for (const [key, value] of Object.entries(fields)) if (value !== undefined) known[key] = value;
  state.history.set(revision, known);
  if (state.history.size > 40) {
    const oldest = Math.min(...state.history.keys());
    state.history.delete(oldest);
  }
}

// -- the event stream (fetch streaming: EventSource cannot send the Authorization header) -------

function setLive(on) {
  const pill = $("live");
  pill.textContent = on ? "live" : "offline";
  pill.className = "pill " + (on ? "on" : "off");
}

function stopStream() {
  if (state.stream) state.stream.abort();
  state.stream = null;
}

function startStream() {
  stopStream();
  const controller = new AbortController();
  state.stream = controller;
  followEvents(controller).catch(() => {});
}

async function followEvents(controller) {
  let delay = 1000;
  while (!controller.signal.aborted) {
    try {
      const headers = { Authorization: "Bearer " + state.token, Accept: "text/event-stream" };
      if (state.lastEventId !== null) headers["Last-Event-ID"] = String(state.lastEventId);
      const response = await fetch("/v1/events", {
        headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer", signal: controller.signal,
      });
      if (response.status === 401) { showLogin("The token is no longer accepted."); return; }
      if (!response.ok || !response.body) throw new Error("HTTP " + response.status);
      setLive(true);
      delay = 1000;
      await readMessages(response.body.getReader(), onMessage);
    } catch (err) {
      if (controller.signal.aborted) return;
    }
    setLive(false);
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 15000);
    scheduleRefresh(); // events may have been missed while away
  }
}

async function readMessages(reader, handle) {
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const message = { event: "message", data: "", id: null };
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") message.event = value;
        else if (field === "data") message.data += value;
        else if (field === "id") message.id = Number(value);
      }
      if (message.data) handle(message);
    }
  }
}

function onMessage(message) {
  const data = JSON.parse(message.data);
  if (message.id !== null) state.lastEventId = message.id;
  switch (message.event) {
    case "hello":
      setRole(data.role);
      return;
    case "reset":
      state.lastEventId = data.last_id;
      scheduleRefresh();
      return;
    case "dropped":
      state.lastEventId = data.last_id; // the stream ends; the loop reconnects and resumes here
      return;
    case "publish":
      remember(data.revision, { published_at: data.published_at, trigger: data.trigger });
      if (data.previous !== null) {
        remember(data.previous, { superseded_at: data.published_at });
        if (data.previous_drain_deadline_at === null) remember(data.previous, { closed_at: data.published_at });
      }
      break;
    case "retire":
      remember(data.revision, {
        published_at: data.published_at, superseded_at: data.superseded_at, closed_at: data.closed_at, forced: data.forced,
      });
      break;
    default:
      break;
  }
  logEvent(message.id, message.event, data);
  scheduleRefresh();
}

function setRole(role) {
  state.role = role;
  document.body.classList.toggle("owner", role !== "operator");
  $("who").textContent = role === "operator" ? "signed in as operator" : "signed in as owner";
}

function describeEvent(type, d) {
  switch (type) {
    case "publish":
      return "revision " + d.revision + " published: " + why(d.trigger) +
        (d.previous !== null ? "; revision " + d.previous + (d.previous_pins ? " draining " + d.previous_pins + " pin(s)" : " closed") : "");
    case "retire":
      return "revision " + d.revision + (d.forced ? " forced closed at its drain deadline (" + d.pins_left + " pin(s) left)" : " drained and closed");
    case "source":
      return "source " + d.source + ": " + (d.previous_state || "new") + " → " + d.state + (d.last_error ? " (" + d.last_error + ")" : "");
    case "session":
      return d.change === "grants" ? "session grants changed" : "session " + d.session_id + " " + d.change + " (" + d.owner + ")";
    case "hold":
      return "hold on revision " + d.revision + " " + d.change + " (" + d.owner + ", expires " + clock(d.expires_at) + ")";
    default:
      return JSON.stringify(d);
  }
}

function logEvent(id, type, data) {
  const list = $("event-log");
  list.prepend(el("li", {}, el("span", { class: "id" }, id !== null ? "#" + id : ""), el("span", { class: "type" }, type),
    " ", clock(data.at), " ", describeEvent(type, data)));
  while (list.children.length > MAX_LOG) list.lastElementChild.remove();
}

// -- rendering ----------------------------------------------------------------------------------

function render() {
  renderNow();
  renderTimeline();
  renderGenerations();
  renderSources();
  renderCatalog();
  renderViews();
  renderSessions();
  renderApprovals();
  renderActions();
  applyFilters();
}

// A filter box hides the rows of its table (data-filter) whose text does not contain it.
function applyFilters() {
  for (const input of document.querySelectorAll("input.filter")) {
    const query = input.value.trim().toLowerCase();
    const table = $(input.dataset.filter);
    if (!table) continue;
    for (const row of table.tBodies[0].rows) row.hidden = query !== "" && !row.textContent.toLowerCase().includes(query);
  }
}

// Long lists fold: more than this many items start collapsed under a summary line.
const FOLD_AT = 3;

function foldable(key, props, summary) {
  const details = el("details", Object.assign({ "data-key": key }, props), el("summary", {}, summary));
  details.open = state.open.has(key);
  details.addEventListener("toggle", () => { if (details.open) state.open.add(key); else state.open.delete(key); });
  return details;
}

function folded(key, summary, items) {
  const list = el("ul", {}, ...items);
  if (items.length <= FOLD_AT) return list;
  const details = foldable(key, {}, summary);
  details.append(list);
  return details;
}

function causeOf(src) {
  const c = src.cause;
  if (!c) return null;
  const parts = [el("span", { class: "kind" }, c.kind)];
  if (c.setting) parts.push(" · setting ", el("code", {}, c.setting));
  if (c.http_status) parts.push(" · HTTP " + c.http_status);
  if (c.exit_code !== null && c.exit_code !== undefined) parts.push(" · exit code " + c.exit_code);
  const box = el("div", { class: "cause" }, ...parts);
  if (c.stderr_tail && c.stderr_tail.length) {
    const details = foldable("stderr:" + src.name, { class: "stderr-tail" }, "last stderr lines (" + c.stderr_tail.length + ")");
    details.append(el("pre", { class: "stderr" }, c.stderr_tail.join("\n")));
    box.append(details);
  }
  return box;
}

const STATE_WORDS = {
  ready: "serving the newest catalog; every source is ready",
  degraded: "serving, with a problem named below",
  error: "serving the last good config; the newest config is invalid",
  starting: "nothing published yet",
};

function renderNow() {
  const s = state.status;
  if (!s) return;
  const rows = [
    ["state", el("span", {}, badge(s.state), " ", STATE_WORDS[s.state] || "")],
    ["revision", el("strong", { id: "now-revision" }, s.revision === null ? "—" : String(s.revision))],
    ["digest", el("code", {}, s.digest ? s.digest.slice(0, 16) + "…" : "—")],
    ["built at", clock(s.built_at) + " (" + ago(s.built_at) + ")"],
    ["published at", clock(s.published_at)],
    ["freshness", s.inputs_changed_since_build
      ? "inputs changed since this revision was built (" + s.inputs_changed_since_build.join(", ") + "); a reload is under way"
      : (s.reconciling ? "reconciling now" : "up to date with its inputs (" + s.tracked_files + " tracked file(s), reload " + (s.reload_mode || "—") + ")")],
    ["last cycle", s.last_cycle ? "#" + s.last_cycle.seq + " " + s.last_cycle.status + " at " + clock(s.last_cycle.finished_at) + (s.last_cycle.error ? " — " + s.last_cycle.error : "") : "—"],
    ["sessions / holds", s.sessions + " / " + s.holds],
  ];
  const dl = el("dl", { class: "kv" });
  for (const [key, value] of rows) dl.append(el("dt", {}, key), el("dd", {}, value));
  const problems = [];
  for (const c of s.conditions || []) problems.push(el("li", { class: "condition" }, c.message + " [" + c.type + "]"));
  for (const name of s.stale_sources || []) {
    const src = (s.sources || []).find((x) => x.name === name);
    problems.push(el("li", {}, "source " + name + " is " + (src ? src.state : "not ready") + (src && src.last_error ? ": " + src.last_error : "")));
  }
  const children = [dl];
  children.push(problems.length ? el("ul", { class: "conditions", id: "conditions" }, ...problems)
    : el("ul", { class: "conditions", id: "conditions" }, el("li", { class: "ok" }, "no degraded conditions")));
  const general = (s.diagnostics || []).filter((d) => d.source === null);
  if (general.length) {
    const items = general.map((d) => el("li", {}, (d.name ? d.name + ": " : "") + d.message + " [" + d.code + "]"));
    const details = foldable("diagnostics", { id: "diagnostics" }, general.length + " catalog diagnostics (name collisions and other merge findings)");
    details.append(el("ul", {}, ...items));
    children.push(details);
  }
  if (s.config_error) children.push(el("h3", {}, "config error"), el("pre", { class: "error" }, s.config_error));
  if (s.warnings && s.warnings.length) children.push(el("h3", {}, "warnings"), el("ul", {}, ...s.warnings.map((w) => el("li", {}, w))));
  const configFiles = (s.inputs || []).filter((i) => i.source === null);
  if (configFiles.length) {
    children.push(el("h3", {}, "config files"), el("ul", {}, ...configFiles.map((i) => el("li", {},
      el("code", {}, i.path), " ", i.exists ? "changed " + ago(i.modified_at) : "missing"))));
  }
  $("now-body").replaceChildren(...children);
}

function liveInfo() {
  const byRevision = new Map();
  for (const g of (state.generations && state.generations.generations) || []) byRevision.set(g.revision, g);
  return byRevision;
}

function renderTimeline() {
  const live = liveInfo();
  const now = Date.now() / 1000;
  const revisions = [...state.history.values()].filter((h) => h.published_at).sort((a, b) => b.revision - a.revision).slice(0, 12);
  const chart = $("timeline");
  const width = Math.max(chart.clientWidth || 900, 600);
  const rowH = 22, top = 8, left = 200, right = 16;
  const height = top + Math.max(1, revisions.length) * rowH + 24;
  chart.setAttribute("viewBox", "0 0 " + width + " " + height);
  chart.setAttribute("height", String(height));
  const nodes = [];
  if (revisions.length === 0) {
    nodes.push(svg("text", { x: 8, y: 24 }, "no revisions yet"));
    chart.replaceChildren(...nodes);
    return;
  }
  let start = Math.min(...revisions.map((r) => r.published_at));
  let end = now;
  for (const r of revisions) {
    const g = live.get(r.revision);
    if (g && g.drain_deadline_at) end = Math.max(end, g.drain_deadline_at);
    for (const h of (g && g.holds) || []) end = Math.max(end, h.expires_at);
  }
  // The axis ends a little after now; deadlines and hold expiries further out are pinned to
  // the right edge with their time written next to them.
  end = Math.min(end, now + Math.max(5, (now - start) * 0.25));
  if (end - start < 30) start = end - 30;
  const span = end - start;
  const x = (t) => left + ((Math.min(Math.max(t, start), end) - start) / span) * (width - left - right);
  const axisY = top + revisions.length * rowH + 4;
  nodes.push(svg("line", { class: "axis", x1: left, x2: width - right, y1: axisY, y2: axisY }));
  for (let i = 0; i <= 4; i++) {
    const t = start + (span * i) / 4;
    nodes.push(svg("text", { class: "tick", x: x(t), y: axisY + 14, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" }, clock(t)));
  }
  nodes.push(svg("line", { class: "now", x1: x(now), x2: x(now), y1: top - 4, y2: axisY }));
  revisions.forEach((r, i) => {
    const y = top + i * rowH;
    const g = live.get(r.revision);
    const kind = g ? g.state : "closed";
    const closedAt = g ? now : (r.closed_at || r.superseded_at || now);
    const label = "r" + r.revision + " · " + whyShort(r.trigger);
    nodes.push(svg("text", { x: 4, y: y + 14, class: "row-label", "data-revision": r.revision }, label.length > 34 ? label.slice(0, 33) + "…" : label));
    const x0 = x(r.published_at), x1 = Math.max(x(closedAt), x0 + 3);
    const bar = svg("rect", { class: "bar " + kind, x: x0, y: y + 3, width: x1 - x0, height: rowH - 8, rx: 3, "data-revision": r.revision });
    const served = (r.superseded_at || (kind === "current" ? now : closedAt)) - r.published_at;
    bar.append(svg("title", {}, "revision " + r.revision + " — " + kind + "; published " + clock(r.published_at) + " (" + why(r.trigger) + "); served " + duration(served)
      + (g ? "; " + g.pins + " pin(s)" : "") + (r.forced ? "; forced closed at its drain deadline" : "")));
    nodes.push(bar);
    if (r.superseded_at && r.superseded_at < closedAt) {
      nodes.push(svg("line", { class: "axis", x1: x(r.superseded_at), x2: x(r.superseded_at), y1: y + 2, y2: y + rowH - 4 }));
    }
    if (g && g.state === "retiring") {
      const notes = [g.pins + " pin(s) draining"];
      if (g.drain_deadline_at) notes.push("deadline " + clock(g.drain_deadline_at));
      for (const h of g.holds || []) notes.push("held by " + h.owner + " until " + clock(h.expires_at));
      // Beside the bar, or before it when the bar reaches the right part of the chart.
      const after = x1 < left + (width - left - right) * 0.55;
      nodes.push(svg("text", { x: after ? x1 + 6 : x0 - 6, y: y + 14, "text-anchor": after ? "start" : "end" }, notes.join(" · ")));
      if (g.drain_deadline_at) {
        const dx = x(g.drain_deadline_at);
        const line = svg("line", { class: "deadline", x1: dx, x2: dx, y1: y + 1, y2: y + rowH - 3 });
        line.append(svg("title", {}, "drain deadline " + clock(g.drain_deadline_at)));
        nodes.push(line);
      }
    }
    if (r.forced && !g) nodes.push(svg("rect", { class: "forced", x: x1 - 3, y: y + 3, width: 3, height: rowH - 8 }));
    for (const h of (g && g.holds) || []) {
      const hx = x(h.expires_at);
      const mark = svg("path", { class: "hold", d: "M" + hx + " " + (y + 3) + " l5 6 l-5 6 l-5 -6 z" });
      mark.append(svg("title", {}, "hold " + h.id + " by " + h.owner + " until " + clock(h.expires_at)));
      nodes.push(mark);
    }
  });
  chart.replaceChildren(...nodes);
}

function renderGenerations() {
  const live = liveInfo();
  const now = Date.now() / 1000;
  const rows = [...state.history.values()].filter((h) => h.published_at).sort((a, b) => b.revision - a.revision).slice(0, 12).map((r) => {
    const g = live.get(r.revision);
    const kind = g ? g.state : "closed";
    const served = (r.superseded_at || (g ? now : r.closed_at || now)) - r.published_at;
    const holds = ((g && g.holds) || []).map((h) => h.owner + " until " + clock(h.expires_at)).join("; ");
    return el("tr", { "data-revision": r.revision, class: "gen-" + kind },
      el("td", {}, String(r.revision)),
      el("td", {}, badge(kind), r.forced ? " forced" : ""),
      el("td", {}, clock(r.published_at)),
      el("td", {}, why(r.trigger)),
      el("td", {}, duration(served) + (g && g.state === "current" ? " so far" : "")),
      el("td", { class: "pins" }, g ? String(g.pins) + (g.operations ? " (" + g.operations + " running)" : "") : (r.closed_at ? "0 — closed " + clock(r.closed_at) : "—")),
      el("td", {}, g && g.drain_deadline_at ? until(g.drain_deadline_at) : "—"),
      el("td", {}, holds || "—"));
  });
  replaceRows($("gen-table").tBodies[0], rows);
}

function renderSources() {
  const s = state.status;
  if (!s) return;
  const rows = (s.sources || []).map((src) => {
    const rejected = (s.diagnostics || []).filter((d) => d.source === src.name);
    const files = (s.inputs || []).filter((i) => i.source === src.name);
    return el("tr", { "data-source": src.name },
      el("td", {}, el("strong", {}, src.name), src.trust === "untrusted" ? el("div", { class: "muted" }, "untrusted metadata") : null),
      el("td", {}, badge(src.state)),
      el("td", {}, String(src.entries)),
      el("td", {}, src.last_ok_at ? clock(src.last_ok_at) + " (" + ago(src.last_ok_at) + ")" : "never"),
      el("td", { class: "last-error" }, src.last_error ? el("span", { class: "error" }, src.last_error) : "—",
        causeOf(src),
        src.consecutive_failures ? el("div", { class: "muted" }, src.consecutive_failures + " failure(s) in a row") : null),
      el("td", {}, src.next_attempt_at ? until(src.next_attempt_at) : "—"),
      el("td", { class: "rejected" }, rejected.length
        ? folded("rejected:" + src.name, rejected.length + " diagnostics", rejected.map((d) => el("li", {}, (d.name ? d.name + ": " : "") + d.message)))
        : "none"),
      el("td", {}, files.length ? el("ul", {}, ...files.map((f) => el("li", {}, el("code", {}, f.path.split("/").pop()),
        " ", f.exists ? "changed " + ago(f.modified_at) : "missing"))) : "—"));
  });
  replaceRows($("source-table").tBodies[0], rows);
}

function renderCatalog() {
  const s = state.status;
  const c = state.catalog;
  if (!s || !c) return;
  const trust = new Map((s.sources || []).map((x) => [x.name, x.trust]));
  const sessions = (state.sessions && state.sessions.sessions) || [];
  const rows = c.entries.map((e) => {
    const findings = (s.diagnostics || []).filter((d) => d.name === e.name && (d.source === null || d.source === e.source));
    const drifted = sessions.filter((x) => x.drifted.includes(e.name) || x.quarantined.includes(e.name)).map((x) => x.id);
    const holders = sessions.filter((x) => x.names.includes(e.name)).map((x) => x.id);
    return el("tr", { "data-name": e.name },
      el("td", {}, el("code", {}, e.name)),
      el("td", {}, e.kind),
      el("td", {}, e.source),
      el("td", {}, el("code", {}, e.upstream_name)),
      el("td", {}, trust.get(e.source) || "—"),
      el("td", {}, findings.length ? folded("findings:" + e.name, findings.length + " findings", findings.map((d) => el("li", {}, d.code + ": " + d.message))) : "none"),
      el("td", {}, drifted.length ? el("span", { class: "error" }, drifted.join(", ")) : "—"),
      el("td", { class: "holders" }, holders.length ? folded("holders:" + e.name, holders.length + " sessions", holders.map((h) => el("li", {}, el("code", {}, h)))) : "—"));
  });
  if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: "8", class: "muted" }, "no entries")));
  replaceRows($("catalog-table").tBodies[0], rows);
}

function renderViews() {
  const s = state.status;
  if (!s) return;
  const rows = (s.views || []).map((v) => el("tr", { "data-view": v.name },
    el("td", {}, el("strong", {}, v.name), el("div", { class: "muted" }, "/mcp/" + v.name)),
    el("td", {}, String(v.entries)),
    el("td", {}, String(v.tools)),
    el("td", {}, String(v.resources)),
    el("td", {}, String(v.resource_templates)),
    el("td", {}, String(v.prompts))));
  if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: "6", class: "muted" }, "no views (views: in the config)")));
  replaceRows($("view-table").tBodies[0], rows);
  const indexes = (s.search_indexes || []).map((i) => el("tr", { "data-index": i.revision + ":" + (i.view || "") },
    el("td", {}, String(i.revision)),
    el("td", {}, i.view || "(whole catalog)"),
    el("td", {}, String(i.tools)),
    el("td", {}, String(i.terms)),
    el("td", {}, (i.bytes / 1048576).toFixed(2) + " MB"),
    el("td", {}, i.build_ms.toFixed(1) + " ms")));
  if (indexes.length === 0) indexes.push(el("tr", {}, el("td", { colspan: "6", class: "muted" }, "none built (no find_tools yet)")));
  replaceRows($("search-table").tBodies[0], indexes);
}

function renderSessions() {
  const list = (state.sessions && state.sessions.sessions) || [];
  const pick = $("session-pick");
  const ids = list.filter((x) => !x.declared).map((x) => x.id);
  if ([...pick.options].map((o) => o.value).join("\n") !== ids.join("\n")) {
    const current = pick.value;
    pick.replaceChildren(...ids.map((id) => el("option", { value: id }, id)));
    if (ids.includes(current)) pick.value = current;
  }
  const rows = list.map((x) => el("tr", { "data-session": x.id },
    el("td", {}, el("code", {}, x.id), x.declared ? el("div", { class: "muted" }, "declared in the config") : null),
    el("td", {}, x.owner),
    el("td", {}, x.grant_policy + (x.sources ? " (" + x.sources.join(", ") + ")" : ""),
      x.view ? el("div", { class: "muted" }, "view " + x.view) : null),
    el("td", {}, String(x.granted)),
    el("td", {}, x.drifted.length ? x.drifted.join(", ") : "—"),
    el("td", {}, x.quarantined.length ? el("span", { class: "error" }, x.quarantined.join(", ")) : "—"),
    el("td", {}, x.last_active_at ? ago(x.last_active_at) : "never")));
  if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: "7", class: "muted" }, "no sessions")));
  replaceRows($("session-table").tBodies[0], rows);
}

function renderApprovals() {
  const list = (state.approvals && state.approvals.approvals) || [];
  const rows = list.map((a) => {
    const answer = el("td", {});
    if (a.state === "pending") {
      const approve = el("button", { type: "button", "data-approve": a.id }, "Approve");
      const deny = el("button", { type: "button", "data-deny": a.id }, "Deny");
      approve.addEventListener("click", () => decideApproval(a.id, "approve"));
      deny.addEventListener("click", () => decideApproval(a.id, "deny"));
      answer.append(approve, " ", deny);
    } else {
      answer.append(a.decided_by ? "by " + a.decided_by : "—");
    }
    return el("tr", { "data-approval": a.id },
      el("td", {}, el("code", {}, a.id)),
      el("td", {}, badge(a.state)),
      el("td", {}, a.tool),
      el("td", {}, a.principal),
      el("td", {}, el("code", {}, a.session)),
      el("td", {}, String(a.revision)),
      el("td", { title: a.arguments_digest }, el("code", {}, a.arguments_digest.slice(0, 12))),
      el("td", { title: a.definition_digest }, el("code", {}, a.definition_digest.slice(0, 12))),
      el("td", {}, a.state === "pending" ? until(a.expires_at) : "—"),
      answer);
  });
  if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: "10", class: "muted" }, "no calls waiting for an approval")));
  replaceRows($("approval-table").tBodies[0], rows);
}

async function loadApprovals() {
  try {
    state.approvals = await api("/v1/approvals");
    renderApprovals();
  } catch (err) {
    if (err instanceof Unauthorized) showLogin("The token is no longer accepted.");
  }
}

async function decideApproval(id, verb) {
  const answer = $("approval-answer");
  answer.className = "answer";
  try {
    const out = await api("/v1/approvals/" + encodeURIComponent(id) + "/" + verb, { method: "POST" });
    answer.textContent = "approval " + out.id + ": " + out.state + " (" + out.tool + " at revision " + out.revision + ")";
  } catch (err) {
    if (err instanceof Unauthorized) { showLogin("The token is no longer accepted."); return; }
    answer.className = "answer error";
    answer.textContent = verb + " failed: " + err.message;
  }
  await loadApprovals();
}

function renderActions() {
  const select = $("refresh-source");
  const names = ((state.status && state.status.sources) || []).map((s) => s.name);
  const current = select.value;
  if ([...select.options].map((o) => o.value).join("\n") !== names.join("\n")) {
    select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    if (names.includes(current)) select.value = current;
  }
}

async function runRefresh(sources) {
  const answer = $("action-answer");
  answer.className = "answer";
  answer.textContent = "refreshing " + (sources ? sources.join(", ") : "every source") + "…";
  try {
    const out = await api("/v1/refresh", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(sources ? { sources } : {}),
    });
    const failed = (out.status.sources || []).filter((s) => (sources ? sources.includes(s.name) : true) && s.last_error);
    answer.textContent = "cycle #" + out.cycle + " " + out.cycle_status + ": revision " + out.revision + " — " +
      (out.changed ? "changed (a new revision was published)" : "unchanged") +
      (out.error ? "\nerror: " + out.error : "") +
      failed.map((s) => "\nsource " + s.name + " is " + s.state + ": " + s.last_error).join("");
    state.status = out.status;
    render();
  } catch (err) {
    if (err instanceof Unauthorized) { showLogin("The token is no longer accepted."); return; }
    answer.className = "answer error";
    answer.textContent = "refresh failed: " + err.message;
  }
}

function splitNames(text) {
  return text.split(",").map((x) => x.trim()).filter((x) => x);
}

async function sessionAction(label, run) {
  const answer = $("session-answer");
  answer.className = "answer";
  try {
    answer.textContent = await run();
    await refresh();
  } catch (err) {
    if (err instanceof Unauthorized) { showLogin("The token is no longer accepted."); return; }
    answer.className = "answer error";
    answer.textContent = label + " failed: " + err.message;
  }
}

async function createSession() {
  const policy = $("new-policy").value;
  const listed = splitNames($("new-names").value);
  const body = { grant_policy: policy };
  const owner = $("new-owner").value.trim();
  if (owner) body.owner = owner;
  if (policy === "explicit") body.names = listed;
  if (policy === "follow" && listed.length) body.sources = listed;
  const out = $("session-token");
  out.className = "answer token";
  try {
    const made = await api("/v1/sessions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    // Shown once, never stored: the operator copies it to the agent now.
    out.textContent = "session " + made.id + " for " + made.owner + " (" + made.grant_policy + ", " + made.granted +
      " names)\ntoken (shown once, copy it now): " + made.token;
    $("new-names").value = "";
    await refresh();
    $("session-pick").value = made.id;
  } catch (err) {
    if (err instanceof Unauthorized) { showLogin("The token is no longer accepted."); return; }
    out.className = "answer error";
    out.textContent = "create failed: " + err.message;
  }
}

function changeSession(kind) {
  const id = $("session-pick").value;
  if (!id) return;
  const names = splitNames($("session-names").value);
  const path = "/v1/sessions/" + encodeURIComponent(id);
  const json = { "Content-Type": "application/json" };
  if (kind === "grant") {
    sessionAction("grant", async () => {
      const out = await api(path + "/grants", { method: "POST", headers: json, body: JSON.stringify({ names }) });
      return "granted to " + id + " at revision " + out.revision + ": " + (out.added.join(", ") || "nothing new");
    });
  } else if (kind === "revoke") {
    sessionAction("revoke", async () => {
      const out = await api(path + "/revoke", { method: "POST", headers: json, body: JSON.stringify({ names }) });
      return "revoked from " + id + ": " + out.removed.join(", ");
    });
  } else {
    sessionAction("delete", async () => {
      await api(path, { method: "DELETE" });
      return "deleted session " + id + " (its token stopped working)";
    });
  }
}

// -- wiring -------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = $("token");
    const token = input.value.trim();
    input.value = "";
    if (token) login(token);
  });
  $("logout").addEventListener("click", () => showLogin("Logged out."));
  for (const input of document.querySelectorAll("input.filter")) input.addEventListener("input", applyFilters);
  $("session-create-form").addEventListener("submit", (event) => { event.preventDefault(); createSession(); });
  $("session-grant").addEventListener("click", () => changeSession("grant"));
  $("session-revoke").addEventListener("click", () => changeSession("revoke"));
  $("session-delete").addEventListener("click", () => changeSession("delete"));
  $("refresh-all").addEventListener("click", () => runRefresh(null));
  $("refresh-one").addEventListener("click", () => {
    const name = $("refresh-source").value;
    if (name) runRefresh([name]);
  });
  let ticks = 0;
  let approvalTicks = 0;
  setInterval(() => {
    if (!state.token || !state.status) return;
    if (++approvalTicks % 2 === 0) loadApprovals(); // parked calls are not events: re-read them
    renderTimeline();
    renderGenerations();
    // Pins change on every call, so they are not events: while a revision drains, re-read them.
    const draining = ((state.generations && state.generations.generations) || []).some((g) => g.state === "retiring");
    if (draining && ++ticks % 2 === 0) scheduleRefresh();
  }, 1000);
  window.addEventListener("resize", () => { if (state.token) renderTimeline(); });
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) login(saved);
});
