// The audit view: plain DOM, no framework. Every value from the log (prompts, outputs, tool
// arguments, owners) is untrusted and goes in with textContent or setAttribute, never as
// HTML; the page's Content-Security-Policy allows only its own scripts besides.
"use strict";

const API = "/audit/api/responses";
const SVG = "http://www.w3.org/2000/svg";
const TERMINAL = new Set(["response.completed", "response.failed", "response.incomplete", "response.cancelled"]);
const UNFINISHED = new Set(["queued", "in_progress"]);
const KINDS = [
  // [kind, colour, legend]: one colour per kind of event on the timeline
  ["lifecycle", "#175cd3", "created / queued / in progress"],
  ["item", "#667085", "item or part added / done"],
  ["delta", "#17803d", "output delta"],
  ["reasoning", "#9e77ed", "reasoning"],
  ["tool", "#f79009", "tool call"],
  ["terminal", "#b42318", "terminal"],
];
const COLOUR = Object.fromEntries(KINDS.map(([k, c]) => [k, c]));

const $ = (id) => document.getElementById(id);
let live = null; // the EventSource following the open response, if any
let openId = null;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function iso(seconds) {
  return seconds == null ? "-" : new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 23);
}

function secs(value) {
  return value == null ? "-" : (value < 1 ? (value * 1000).toFixed(1) + " ms" : value.toFixed(3) + " s");
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

async function getJSON(url) {
  const reply = await fetch(url, { credentials: "same-origin" });
  if (reply.status === 401) {
    $("key-form").hidden = false;
    throw new Error("This audit view needs the audit key.");
  }
  const body = await reply.json();
  if (!reply.ok) throw new Error(body.error ? body.error.message : reply.statusText);
  return body;
}

function filterQuery(names) {
  const q = new URLSearchParams();
  for (const name of names || ["owner", "model", "status", "reason"]) {
    const value = $("f-" + name).value.trim();
    if (value) q.set(name, value);
  }
  for (const name of ["since", "until"]) {
    const value = $("f-" + name).value;
    // datetime-local is read as UTC, as the table shows times
    if (value) q.set(name, String(Date.parse(value + "Z") / 1000));
  }
  return q;
}

// The two lists: where each reads, which filters apply, how a row looks, its next page.
const LISTS = {
  responses: { url: API, filters: undefined, row: (r) => listRow(r), more: "more", after: null },
  conversations: {
    url: "/audit/api/conversations", filters: ["owner"], row: (r) => conversationRow(r),
    more: "more-conversations", after: null,
  },
};

async function loadTable(name, append) {
  const list = LISTS[name];
  const q = filterQuery(list.filters);
  if (append && list.after) q.set("after", list.after);
  try {
    const page = await getJSON(list.url + "?" + q.toString());
    if (name === "responses") showError("");
    const body = $(name).tBodies[0];
    if (!append) body.replaceChildren();
    for (const row of page.data) body.append(list.row(row));
    list.after = page.last_id;
    $(list.more).hidden = !page.has_more;
  } catch (err) {
    showError(err.message);
  }
}

const loadList = (append) => loadTable("responses", append);
const loadConversations = (append) => loadTable("conversations", append);

function conversationRow(row) {
  const tr = el("tr");
  tr.dataset.id = row.id;
  tr.append(
    el("td", row.id, "id"),
    el("td", iso(row.created_at).slice(0, 19)),
    el("td", row.owner),
    el("td", row.items + (row.deleted ? " (deleted)" : "")),
  );
  tr.addEventListener("click", () => openConversation(row.id));
  return tr;
}

function markOpen(id) {
  for (const table of ["responses", "conversations"]) {
    for (const tr of $(table).tBodies[0].rows) tr.classList.toggle("open", tr.dataset.id === id);
  }
}

function listRow(row) {
  const tr = el("tr");
  tr.dataset.id = row.id;
  tr.dataset.status = row.status;
  tr.append(
    el("td", row.id, "id"),
    el("td", iso(row.created_at).slice(0, 19)),
    el("td", row.status + (row.deleted ? " (deleted)" : ""), "status status-" + row.status),
    el("td", row.model),
    el("td", row.owner),
    el("td", row.events),
  );
  tr.addEventListener("click", () => openResponse(row.id));
  return tr;
}

async function openResponse(id) {
  if (live) { live.close(); live = null; }
  openId = id;
  markOpen(id);
  let view;
  try {
    view = await getJSON(API + "/" + encodeURIComponent(id));
  } catch (err) {
    showError(err.message);
    return;
  }
  if (openId !== id) return;
  showError("");
  $("detail").hidden = false;
  $("d-id").textContent = id;
  const row = view.row || {};
  $("d-meta").textContent = [
    "status " + (row.status || "?"),
    "model " + (row.model || "?"),
    "owner " + (row.owner || "?"),
    "created " + iso(row.created_at),
    (row.events || 0) + " events",
  ].join(" · ");
  drawTimeline(view);
  const d = view.durations;
  $("d-durations").textContent =
    "queue wait " + secs(d.queue_wait) + " · time to first delta " + secs(d.time_to_first_token) +
    " · generation " + secs(d.generation) + " · total " + secs(d.total);
  $("d-integrity").textContent = integrityText(view.integrity);
  drawTurns(view);
  drawWebhooks(view);
  const liveBox = $("d-live");
  liveBox.hidden = true;
  if (UNFINISHED.has(row.status)) follow(id);
}

function kindOf(type) {
  if (TERMINAL.has(type)) return "terminal";
  if (type === "response.created" || type === "response.queued" || type === "response.in_progress") return "lifecycle";
  if (type.includes("function_call") || type.includes("custom_tool_call") || type.includes("mcp") ||
      type.includes("web_search_call") || type.includes("code_interpreter_call")) return "tool";
  if (type.includes("reasoning")) return "reasoning";
  if (type.endsWith(".delta")) return "delta";
  return "item";
}

function drawTimeline(view) {
  const box = $("timeline");
  box.replaceChildren();
  const events = view.events;
  if (!events.length) return;
  const t0 = view.moments.created != null ? view.moments.created : events[0].at;
  const span = Math.max(events[events.length - 1].at - t0, 0.001);
  const W = 760, H = 150, L = 40, R = 20, top = 30, axis = 110;
  const x = (t) => L + ((t - t0) / span) * (W - L - R);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", id: "timeline-svg" });
  root.append(svg("title", {}, "Event timeline of " + view.row?.id));
  const m = view.moments;
  if (m.started != null) {
    // the queue wait: created -> started
    root.append(svg("rect", { x: x(t0), y: top, width: Math.max(x(m.started) - x(t0), 1), height: 14, fill: "#d1e0ff", class: "queue-wait" }));
    root.append(svg("text", { x: x(t0) + 2, y: top - 4, "font-size": 10, fill: "#175cd3" }, "queue wait " + secs(m.started - t0)));
  }
  if (m.first_output != null) {
    const fx = x(m.first_output);
    root.append(svg("line", { x1: fx, x2: fx, y1: top + 18, y2: axis, stroke: "#17803d", "stroke-dasharray": "3 2", class: "first-delta" }));
    root.append(svg("text", { x: Math.min(fx + 3, W - 150), y: top + 28, "font-size": 10, fill: "#17803d" }, "first delta " + secs(m.first_output - t0)));
  }
  root.append(svg("line", { x1: L, x2: W - R, y1: axis, y2: axis, stroke: "#98a2b3" }));
  for (let i = 0; i <= 4; i++) {
    const t = t0 + (span * i) / 4;
    root.append(svg("text", { x: x(t), y: axis + 14, "font-size": 10, "text-anchor": "middle", fill: "#475467" }, secs(t - t0)));
  }
  const rows = { lifecycle: 0, item: 1, tool: 2, reasoning: 3, delta: 4, terminal: 0 };
  for (const e of events) {
    const kind = kindOf(e.type);
    const mark = svg("rect", {
      x: x(e.at) - 1.5, y: top + 20 + rows[kind] * 11, width: 3, height: 9,
      fill: COLOUR[kind], class: "mark mark-" + kind,
    });
    mark.append(svg("title", {}, `#${e.position} +${secs(e.at - t0)} ${e.type} ${e.summary || ""}`));
    root.append(mark);
  }
  let lx = L;
  for (const [kind, colour, legend] of KINDS) {
    root.append(svg("rect", { x: lx, y: H - 12, width: 8, height: 8, fill: colour }));
    root.append(svg("text", { x: lx + 11, y: H - 5, "font-size": 10, fill: "#475467" }, legend));
    lx += 22 + legend.length * 5.2;
  }
  box.append(root);
}

function entryNode(entry, side) {
  const node = el("div", null, "entry " + entry.kind + (side === "output" && entry.kind === "message" ? " output" : ""));
  let who = entry.kind === "message" ? (entry.role || "message") : entry.kind.replaceAll("_", " ");
  if (entry.name) who += " " + entry.name;
  if (entry.call_id) who += " (" + entry.call_id + ")";
  node.append(el("span", side + ": " + who, "who"), el("pre", entry.text));
  return node;
}

// The response's hash chain, the latest checkpoint and its erasure (docs/audit.md).
function integrityText(state) {
  if (!state) return "";
  const parts = [state.broken_at != null ? "chain " + state.chain + " at " + state.broken_at : "chain " + state.chain];
  if (state.checkpoint == null) parts.push("no checkpoint yet");
  else if (state.in_checkpoint == null) parts.push("not in checkpoint " + state.checkpoint);
  else parts.push((state.in_checkpoint ? "included in" : "DIFFERS from") + " checkpoint " + state.checkpoint);
  if (state.erased_at != null) parts.push("erased " + iso(state.erased_at) + " (" + state.erased_because + ")");
  return parts.join(" · ");
}

function usageText(usage) {
  if (!usage) return "usage: -";
  return "usage: " + usage.input_tokens + " in, " + usage.output_tokens + " out, " + usage.total_tokens + " total";
}

function drawTurns(view) {
  const box = $("turns");
  box.replaceChildren();
  if (view.missing) box.append(el("p", "An earlier turn is no longer in the log: " + view.missing));
  view.turns.forEach((turn, n) => {
    const section = el("div", null, "turn");
    let head = "Turn " + (n + 1) + " · " + turn.response_id + " · " + turn.status;
    if (turn.deleted_at) head += " · deleted " + iso(turn.deleted_at);
    section.append(el("h4", head));
    if (turn.instructions) section.append(entryNode({ kind: "message", role: "instructions", text: turn.instructions }, "input"));
    for (const entry of turn.input) section.append(entryNode(entry, "input"));
    for (const entry of turn.output) section.append(entryNode(entry, "output"));
    if (turn.error) section.append(el("p", "error: " + turn.error));
    if (turn.end_reason) section.append(el("p", "end reason: " + turn.end_reason));
    section.append(el("p", usageText(turn.usage), "usage"));
    box.append(section);
  });
}

function drawWebhooks(view) {
  // Each webhook delivery of the response, with every attempt: when, status, latency, error.
  const box = $("webhooks");
  box.replaceChildren();
  const found = view.webhooks || [];
  box.hidden = !found.length;
  if (!found.length) return;
  box.append(el("h3", "Webhooks"));
  for (const record of found) {
    const d = record.delivery;
    const section = el("div", null, "webhook");
    section.append(el("h4", d.event_type + " → " + d.endpoint_id + " · " + d.status + " · webhook-id " + record.webhook_id));
    const table = el("table");
    const head = el("tr");
    for (const name of ["#", "started", "status", "latency", "outcome", "process", "error"]) head.append(el("th", name));
    table.append(head);
    for (const a of record.attempts) {
      const row = el("tr", null, "attempt attempt-" + a.outcome);
      for (const value of [a.number, iso(a.started_at), a.status_code == null ? "-" : a.status_code,
        secs(a.latency_s), a.outcome, a.worker, a.error || "-"]) row.append(el("td", value));
      table.append(row);
    }
    section.append(table);
    box.append(section);
  }
}

async function openConversation(id) {
  if (live) { live.close(); live = null; }
  openId = id;
  markOpen(id);
  let view;
  try {
    view = await getJSON("/audit/api/conversations/" + encodeURIComponent(id));
  } catch (err) {
    showError(err.message);
    return;
  }
  if (openId !== id) return;
  showError("");
  $("detail").hidden = false;
  $("d-id").textContent = id;
  $("d-meta").textContent = view.turns.length + " turns · " + usageText(view.usage);
  $("d-live").hidden = true;
  $("timeline").replaceChildren(el("p", "A conversation: open one of its responses for its timeline."));
  $("d-durations").textContent = "";
  $("d-integrity").textContent = "";
  drawTurns(view);
}

function follow(id) {
  const liveBox = $("d-live");
  liveBox.hidden = false;
  liveBox.textContent = "following live…";
  let count = 0;
  let text = "";
  const source = new EventSource(API + "/" + encodeURIComponent(id) + "/events");
  live = source;
  source.onmessage = (message) => {
    if (message.data === "[DONE]") { source.close(); return; }
    const event = JSON.parse(message.data);
    count += 1;
    if (event.type === "response.output_text.delta") text += event.delta;
    liveBox.textContent = "live: " + count + " events, last " + event.type + (text ? " · " + text : "");
    if (TERMINAL.has(event.type)) {
      source.close();
      if (live === source) live = null;
      liveBox.dataset.done = event.type;
      refreshRow(id, event.response && event.response.status);
      if (openId === id) openResponse(id).then(() => {
        $("d-live").hidden = false;
        $("d-live").textContent = "followed live to " + event.type + " (" + count + " events)";
      });
    }
  };
  source.onerror = () => {
    // The server ends the stream after the terminal event; any other end is an error.
    if (source.readyState === EventSource.CLOSED || live !== source) return;
    source.close();
    liveBox.textContent = "the live stream ended early (" + count + " events)";
  };
}

function refreshRow(id, status) {
  for (const tr of $("responses").tBodies[0].rows) {
    if (tr.dataset.id === id && status) {
      tr.dataset.status = status;
      tr.cells[2].textContent = status;
      tr.cells[2].className = "status status-" + status;
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    loadList(false);
    loadConversations(false);
  });
  $("more").addEventListener("click", () => loadList(true));
  $("more-conversations").addEventListener("click", () => loadConversations(true));
  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    // A cookie (not a header) so that the EventSource of a live response carries it too.
    document.cookie = "resplog_audit=" + encodeURIComponent($("key").value) + "; path=/audit; SameSite=Strict";
    $("key-form").hidden = true;
    loadList(false);
    loadConversations(false);
  });
  $("open-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = $("open-id").value.trim();
    if (id.startsWith("conv_")) openConversation(id); else if (id) openResponse(id);
  });
  const wanted = new URLSearchParams(location.search).get("id");
  loadConversations(false);
  loadList(false).then(() => {
    if (wanted && wanted.startsWith("conv_")) openConversation(wanted);
    else if (wanted) openResponse(wanted);
  });
});
