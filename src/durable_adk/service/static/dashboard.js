// durable-adk dashboard: plain JavaScript over the worker's guarded /v1 API.
// Everything shown is built with DOM text nodes (never innerHTML): event text,
// tool arguments and error messages may hold hostile strings.
"use strict";

const STATUSES = ["QUEUED", "RUNNING", "PAUSED", "DONE", "FAILED", "PARKED", "CANCELLED"];
const REFRESH_MS = 2000;
const TOKEN_KEY = "durable-adk-token";
const OPERATOR_KEY = "durable-adk-operator";

const state = { status: "", app: "", selected: null, timer: null };

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name === "onclick") node.addEventListener("click", value);
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child ?? "")));
  }
  return node;
}

function when(seconds) {
  if (!seconds) return "";
  return new Date(seconds * 1000).toLocaleTimeString();
}

// An id as one path segment (docs/service.md, "Ids in paths"): percent-encoded,
// so a call id with "/" (a Workflow node's, "wf_tool_confirmation:flow@1/ship@1")
// stays one segment; the worker decodes it.
function segment(id) {
  return encodeURIComponent(String(id));
}

function short(text, size) {
  const value = String(text ?? "");
  return value.length > size ? value.slice(0, size - 1) + "…" : value;
}

// ------------------------------------------------------------------ token

function takeTokenFromHash() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function showLogin(message) {
  clearTimeout(state.timer);
  $("main").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
}

class Unauthorized extends Error {}

async function api(path, options) {
  const headers = { Authorization: "Bearer " + token(), Accept: "application/json" };
  if (options && options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...(options || {}), headers });
  if (response.status === 401) throw new Unauthorized("wrong or missing token");
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = body.error || {};
    throw new Error((error.code || response.status) + ": " + (error.message || response.statusText));
  }
  return body;
}

// ----------------------------------------------------------------- render

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function statusCell(status) {
  return el("td", { class: "status status-" + status }, status);
}

function renderCounts(counts) {
  const tiles = STATUSES.map((status) =>
    el("button", {
      class: "tile" + (state.status === status ? " sel" : ""),
      "data-status": status,
      type: "button",
      onclick: () => { state.status = state.status === status ? "" : status; $("status-filter").value = state.status; refresh(); },
    }, el("b", {}, counts[status] ?? 0), status));
  $("counts").replaceChildren(...tiles);
}

function appQuery() {
  return state.app ? "&app_name=" + encodeURIComponent(state.app) : "";
}

function renderApps(apps) {
  const filter = $("app-filter");
  const names = Object.keys(apps.apps);
  if (state.app && !names.includes(state.app)) names.push(state.app);
  const options = [el("option", { value: "" }, "all apps")].concat(
    names.map((name) => el("option", { value: name }, name + (name === apps.serving ? " (this worker)" : ""))));
  filter.replaceChildren(...options);
  filter.value = state.app;
}

function renderParked(runs) {
  const rows = runs.map((run) => el("tr", { "data-run-id": run.run_id },
    el("td", { class: "id" }, run.run_id),
    el("td", { class: "id" }, run.app_name),
    el("td", { class: "id" }, run.user_id + "/" + run.session_id),
    el("td", {}, run.classification || ""),
    el("td", { class: "reason" }, run.last_error || ""),
    el("td", {}, run.attempts),
    el("td", {}, when(run.finished_at || run.updated_at)),
    el("td", {}, el("button", {
      class: "retry", type: "button", "data-run-id": run.run_id,
      onclick: (event) => retry(run.run_id, event.target),
    }, "Retry"), " ", el("button", {
      class: "open", type: "button", "data-run-id": run.run_id,
      onclick: () => select(run),
    }, "Resolve / abandon…"))));
  fill($("parked").tBodies[0], rows);
  $("parked-empty").hidden = runs.length > 0;
}

function asks(interrupt) {
  // A confirmation (a tool's or a Workflow node's) shows the call it guards.
  const guarded = interrupt.guarded_call;
  if (interrupt.kind === "confirmation" && guarded) {
    return guarded.name + "(" + JSON.stringify(guarded.args ?? {}) + ")";
  }
  return interrupt.name + " " + JSON.stringify(interrupt.args || {});
}

function renderInterrupts(interrupts) {
  const rows = interrupts.map((item) => {
    const buttons = [];
    if (item.kind === "confirmation") {
      buttons.push(el("button", {
        class: "approve", type: "button", "data-call-id": item.call_id,
        onclick: (event) => answer(item, { decision: "approve" }, event.target),
      }, "Approve"), " ");
    } else {
      buttons.push(el("button", {
        class: "send", type: "button", "data-call-id": item.call_id,
        onclick: (event) => answer(item, null, event.target),
      }, "Send payload"), " ");
    }
    buttons.push(el("button", {
      class: "deny", type: "button", "data-call-id": item.call_id,
      onclick: (event) => answer(item, { decision: "deny" }, event.target),
    }, "Deny"));
    return el("tr", { "data-call-id": item.call_id },
      el("td", { class: "id" }, short(item.call_id, 24)),
      el("td", {}, item.kind),
      el("td", { class: "reason" }, short(asks(item), 120)),
      el("td", { class: "id" }, item.app_name),
      el("td", { class: "id" }, item.user_id + "/" + item.session_id),
      el("td", { class: "id" }, short(item.run_id, 24)),
      el("td", {}, item.deadline_at ? when(item.deadline_at) : ""),
      el("td", {}, ...buttons));
  });
  fill($("interrupts").tBodies[0], rows);
  $("interrupts-empty").hidden = interrupts.length > 0;
}

async function answer(item, chosen, button) {
  const by = $("answer-by").value.trim();
  if (!by) { $("answer-message").textContent = "Give your name (who answers) first."; return; }
  sessionStorage.setItem(OPERATOR_KEY, by);
  const body = { by, session_id: item.session_id, ...(chosen || {}) };
  if (!chosen) {
    try { body.payload = JSON.parse($("answer-payload").value); }
    catch (error) { $("answer-message").textContent = "The payload is not JSON: " + error.message; return; }
  }
  button.disabled = true;
  try {
    const answered = await api("/v1/interrupts/" + segment(item.call_id),
      { method: "POST", body: JSON.stringify(body) });
    $("answer-message").textContent = answered.message;
  } catch (error) {
    if (error instanceof Unauthorized) return showLogin(error.message);
    $("answer-message").textContent = "Answer failed: " + error.message;
    button.disabled = false;
  }
  refresh();
}

function renderSchedules(schedules) {
  const rows = schedules.map((item) => {
    const buttons = [];
    if (item.state === "active") {
      buttons.push(el("button", {
        class: "trigger", type: "button", "data-schedule": item.name,
        onclick: (event) => scheduleAction(item, "trigger", event.target),
      }, "Trigger now"), " ");
      buttons.push(el("button", {
        class: "pause", type: "button", "data-schedule": item.name,
        onclick: (event) => scheduleAction(item, "pause", event.target),
      }, "Pause"));
    } else if (item.state === "paused") {
      buttons.push(el("button", {
        class: "resume", type: "button", "data-schedule": item.name,
        onclick: (event) => scheduleAction(item, "resume", event.target),
      }, "Resume"));
    }
    return el("tr", { "data-schedule": item.name },
      el("td", { class: "id" }, item.name),
      el("td", { class: item.state === "active" ? "" : "muted" }, item.state),
      el("td", { class: "version" }, item.app_version || "-"),
      el("td", {}, item.cron ? item.cron + " (" + item.timezone + ")" : "every " + item.every_seconds + " s"),
      el("td", {}, item.next_tick),
      el("td", { class: "id" }, short(item.last_run_id || "", 24)),
      el("td", {}, item.missed),
      el("td", {}, item.overlap),
      el("td", {}, item.catch_up),
      el("td", {}, ...buttons));
  });
  fill($("schedules").tBodies[0], rows);
  $("schedules-empty").hidden = schedules.length > 0;
}

async function scheduleAction(item, kind, button) {
  const by = $("schedule-by").value.trim();
  if (!by) { $("schedule-message").textContent = "Give your name (who acts) first."; return; }
  sessionStorage.setItem(OPERATOR_KEY, by);
  button.disabled = true;
  try {
    const done = await api("/v1/schedules/" + segment(item.name) + "/" + kind,
      { method: "POST", body: JSON.stringify({ by }) });
    $("schedule-message").textContent = kind === "trigger"
      ? "Triggered " + item.name + ": tick " + done.tick_key + " starts run " + done.run_id + " at the next poll."
      : item.name + (done.changed ? " is now " + done.schedule.state : " was already " + done.schedule.state) + ".";
  } catch (error) {
    if (error instanceof Unauthorized) return showLogin(error.message);
    $("schedule-message").textContent = kind + " failed: " + error.message;
    button.disabled = false;
  }
  refresh();
}

function renderVersions(versions) {
  const named = versions.filter((item) => item.version !== "(none)");
  const rows = named.map((item) => {
    const drained = item.drained_at !== null;
    const kind = drained ? "undrain" : "drain";
    const runs = Object.entries(item.runs).map(([status, n]) => status + " " + n).join(", ");
    return el("tr", { "data-version": item.version },
      el("td", { class: "id" }, item.version),
      el("td", {}, runs || "-"),
      el("td", { class: "id" }, item.own_workers.join(", ") || "-"),
      el("td", { class: "id" }, item.continued_by.join(", ") || "-"),
      el("td", { class: item.waiting ? "" : "muted" }, String(item.waiting)),
      el("td", { class: drained ? "muted" : "" }, drained ? "drained by " + item.drained_by : "taking runs"),
      el("td", {},
        el("button", {
          class: kind, type: "button", "data-version": item.version,
          onclick: (event) => versionAction(item, kind, event.target),
        }, drained ? "Undrain" : "Drain"), " ",
        el("button", {
          class: "move", type: "button", "data-version": item.version,
          onclick: (event) => versionAction(item, "move", event.target),
        }, "Move runs"), " ",
        el("button", {
          class: "abandon", type: "button", "data-version": item.version,
          onclick: (event) => versionAction(item, "abandon", event.target),
        }, "Abandon runs")));
  });
  fill($("versions").tBodies[0], rows);
  $("versions-empty").hidden = named.length > 0;
}

async function versionAction(item, kind, button) {
  const by = $("version-by").value.trim();
  if (!by) { $("version-message").textContent = "Give your name (who acts) first."; return; }
  const to = $("version-to").value.trim();
  const reason = $("version-reason").value.trim();
  if (kind === "move" && !to) { $("version-message").textContent = "Give the version to move to first."; return; }
  if (kind === "abandon" && !reason) { $("version-message").textContent = "Give a reason to abandon runs."; return; }
  sessionStorage.setItem(OPERATOR_KEY, by);
  button.disabled = true;
  const body = { by };
  if (kind === "move") body.to = to;
  if (reason) body.reason = reason;
  try {
    const done = await api("/v1/versions/" + segment(item.version) + "/" + kind,
      { method: "POST", body: JSON.stringify(body) });
    if (kind === "move") {
      $("version-message").textContent = done.moved + " open run(s) of " + item.version + " moved to " + done.to + ".";
    } else if (kind === "abandon") {
      $("version-message").textContent = done.cancelled.length + " open run(s) of " + item.version + " cancelled.";
    } else {
      const now = done.drained ? "drained: it starts no new run" : "taking new runs";
      $("version-message").textContent = item.version + (done.changed ? " is now " : " was already ") + now + ".";
    }
  } catch (error) {
    if (error instanceof Unauthorized) return showLogin(error.message);
    $("version-message").textContent = kind + " failed: " + error.message;
    button.disabled = false;
  }
  refresh();
}

function renderRuns(runs) {
  const rows = runs.map((run) => el("tr", {
    class: "pick", "data-run-id": run.run_id, onclick: () => select(run),
  },
    el("td", { class: "id" }, run.run_id),
    el("td", { class: "id" }, run.app_name),
    el("td", { class: "id" }, run.user_id + "/" + run.session_id),
    statusCell(run.status),
    el("td", {}, run.classification || ""),
    el("td", { class: "id", title: run.app_fingerprint || "" }, run.app_version || ""),
    el("td", {}, run.attempts),
    el("td", { class: "id" }, short(run.owner, 28)),
    el("td", {}, when(run.updated_at))));
  fill($("runs").tBodies[0], rows);
  $("runs-empty").hidden = runs.length > 0;
}

// The jobs and sagas tables: a header in words for each column and how a cell reads.
const session = (item) => (item.user_id || "") + (item.session_id ? "/" + item.session_id : "");
const LISTS = {
  jobs: {
    empty: "No jobs. A job-backed tool's long-running work would appear here: its tool, run, state and deadline.",
    columns: [
      ["job", "id", (j) => j.job_id],
      ["tool", "", (j) => j.tool_name],
      ["app", "id", (j) => j.app_name || ""],
      ["session", "id", session],
      ["state", "", (j) => j.state],
      ["submitted", "", (j) => when(j.submitted_at)],
      ["deadline", "", (j) => when(j.deadline_at)],
      ["last progress", "", (j) => when(j.progress_at)],
    ],
  },
  sagas: {
    empty: "No sagas. A saga's run would appear here: its name, status and why it failed or compensated.",
    columns: [
      ["saga", "id", (s) => s.saga_id],
      ["name", "", (s) => s.name],
      ["app", "id", (s) => s.app_name],
      ["session", "id", session],
      ["status", "", (s) => s.status],
      ["reason", "reason", (s) => short(s.reason || "", 60)],
      ["owner", "id", (s) => short(s.owner || "", 28)],
      ["updated", "", (s) => when(s.updated_at)],
    ],
  },
};

function renderList(id, listing) {
  const table = $(id);
  const spec = LISTS[id];
  const items = listing.items || [];
  $(id + "-note").textContent = listing.available ? (items.length ? "" : spec.empty) : (listing.note || "Not available.");
  table.tHead.replaceChildren(el("tr", {}, ...spec.columns.map(([title]) => el("th", {}, title))));
  fill(table.tBodies[0], items.map((item) => el("tr", {},
    ...spec.columns.map(([, kind, cell]) => el("td", { class: kind }, cell(item))))));
  table.hidden = items.length === 0;
}

function describe(event) {
  const parts = (event.content && event.content.parts) || [];
  const out = [];
  for (const part of parts) {
    if (part.text) out.push(["text", part.text]);
    if (part.function_call) out.push(["call", part.function_call.name + "(" + JSON.stringify(part.function_call.args || {}) + ")"]);
    if (part.function_response) out.push(["response", part.function_response.name + " → " + JSON.stringify(part.function_response.response || {})]);
  }
  if (!out.length) {
    const actions = event.actions || {};
    const delta = actions.state_delta || {};
    const marks = Object.keys(actions).filter((k) => actions[k] === true);
    if (Object.keys(delta).length) out.push(["state", JSON.stringify(delta)]);
    else out.push(["marker", marks.length ? marks.join(", ") : "(no content)"]);
  }
  return out;
}

function actionItem(action) {
  const why = action.reason ? ": " + action.reason : "";
  return el("li", { class: "action", "data-action": action.action },
    el("span", { class: "id" }, when(action.created_at)),
    el("span", {}, action.actor, " ", el("span", { class: "kind" }, action.action)),
    el("span", { class: "reason" }, action.status_before + " → " + action.status_after + why));
}

function renderTimeline(run, detail) {
  // The run's own events (read by the run's app and session, whatever app this
  // worker serves), with operator actions and a marker where the epoch changes.
  $("timeline-title").textContent = run.user_id + "/" + run.session_id + " · app " + detail.run.app_name +
    (detail.run.app_version ? " " + detail.run.app_version + " (" + (detail.run.app_fingerprint || "") + ")" : "");
  const finding = detail.finding;
  $("finding").textContent = "run " + run.run_id + " is " + detail.run.status +
    (finding ? "; the classifier reads " + finding.cls + ": " + finding.reason : "") +
    (detail.note ? "; not classified: " + detail.note : "");
  const starts = new Map((detail.attempts || []).map((a) => [a.first_seq, a]));
  const actions = (detail.actions || []).slice();
  const items = [];
  for (const { seq, event } of detail.events) {
    while (actions.length && actions[0].created_at <= (event.timestamp || 0)) items.push(actionItem(actions.shift()));
    const attempt = starts.get(seq);
    if (attempt) {
      items.push(el("li", { class: "takeover", "data-epoch": attempt.epoch },
        el("span", { class: "id" }, "epoch " + attempt.epoch),
        el("span", {}, attempt.by_operator ? "operator " + attempt.by_operator : "a worker"),
        el("span", { class: "muted" }, attempt.events + " event(s)")));
    }
    for (const [kind, text] of describe(event)) {
      items.push(el("li", { "data-seq": seq, class: "mine" },
        el("span", { class: "id" }, "#" + seq),
        el("span", {}, event.author, " ", el("span", { class: "kind" }, kind)),
        el("span", { class: "reason" }, short(text, 400))));
    }
  }
  for (const action of actions) items.push(actionItem(action));
  $("timeline").replaceChildren(...items);
  renderControls(detail.run);
}

function renderControls(run) {
  $("controls").hidden = false;
  $("controls-run").textContent = run.run_id + " (" + run.status + ")";
  const closable = run.status === "PARKED" || run.status === "FAILED";
  $("do-resolve").disabled = !closable;
  $("do-abandon").disabled = !closable;
  $("do-cancel").disabled = !["QUEUED", "RUNNING", "PAUSED", "PARKED"].includes(run.status);
}

// ---------------------------------------------------------------- actions

async function retry(runId, button) {
  button.disabled = true;
  try {
    const by = operatorName() || "dashboard";
    const run = await api("/v1/runs/" + segment(runId) + "/retry",
      { method: "POST", body: JSON.stringify({ by }) });
    $("action-message").textContent = "Run " + run.run_id + " is " + run.status + ": a worker will recover it.";
  } catch (error) {
    if (error instanceof Unauthorized) return showLogin(error.message);
    $("action-message").textContent = "Retry failed: " + error.message;
    button.disabled = false;
  }
  refresh();
}

function operatorName() {
  const name = $("op-by").value.trim();
  if (name) sessionStorage.setItem(OPERATOR_KEY, name);
  return name;
}

async function act(kind) {
  const run = state.selected;
  if (!run) return;
  const body = { by: operatorName() };
  const reason = $("op-reason").value.trim();
  if (reason) body.reason = reason;
  if (!body.by) { $("action-message").textContent = "Give your name (who acts) first."; return; }
  if (kind === "resolve") {
    try { body.result = JSON.parse($("op-result").value); }
    catch (error) { $("action-message").textContent = "The result is not JSON: " + error.message; return; }
  }
  const buttons = document.querySelectorAll("#controls button");
  buttons.forEach((b) => { b.disabled = true; });
  try {
    const outcome = await api("/v1/runs/" + segment(run.run_id) + "/" + kind,
      { method: "POST", body: JSON.stringify(body) });
    $("action-message").textContent = outcome.message;
  } catch (error) {
    if (error instanceof Unauthorized) return showLogin(error.message);
    $("action-message").textContent = kind + " failed: " + error.message;
  }
  refresh();
}

async function select(run) {
  state.selected = run;
  await loadTimeline();
}

async function loadTimeline() {
  const run = state.selected;
  if (!run) return;
  renderTimeline(run, await api("/v1/runs/" + segment(run.run_id)));
}

async function refresh() {
  clearTimeout(state.timer);
  try {
    const filter = state.status ? "&status=" + state.status : "";
    const apps = appQuery();
    const [health, stats, counts, parked, runs, jobs, sagas, known, waiting, schedules, versions] = await Promise.all([
      fetch("/healthz").then((r) => r.json()),
      api("/v1/stats"),
      api("/v1/runs-by-status?" + apps.slice(1)),
      api("/v1/runs?status=PARKED&limit=200" + apps),
      api("/v1/runs?limit=50" + filter + apps),
      api("/v1/jobs?limit=50"),
      api("/v1/sagas?limit=50"),
      api("/v1/apps"),
      api("/v1/interrupts?limit=200" + apps),
      api("/v1/schedules"),
      api("/v1/versions"),
    ]);
    $("login").hidden = true;
    $("main").hidden = false;
    $("worker").textContent = "worker " + health.worker_id + " · app " + health.app_name + (health.draining ? " · draining" : "");
    $("stats").textContent = stats.sessions + " sessions · " + stats.events + " events · " + stats.runs + " runs · " + stats.dead_letters + " dead letters";
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    renderApps(known);
    renderCounts(counts.counts);
    renderParked(parked.runs);
    renderInterrupts(waiting.interrupts);
    renderSchedules(schedules.schedules);
    renderVersions(versions.versions);
    renderRuns(runs.runs);
    renderList("jobs", jobs);
    renderList("sagas", sagas);
    await loadTimeline();
  } catch (error) {
    if (error instanceof Unauthorized) return showLogin(error.message);
    $("updated").textContent = "refresh failed: " + error.message;
  }
  state.timer = setTimeout(refresh, REFRESH_MS);
}

function start() {
  takeTokenFromHash();
  const filter = $("status-filter");
  for (const status of STATUSES) filter.append(el("option", { value: status }, status));
  filter.addEventListener("change", () => { state.status = filter.value; refresh(); });
  $("app-filter").addEventListener("change", () => { state.app = $("app-filter").value; refresh(); });
  $("op-by").value = sessionStorage.getItem(OPERATOR_KEY) || "";
  $("answer-by").value = sessionStorage.getItem(OPERATOR_KEY) || "";
  $("answer-form").addEventListener("submit", (event) => event.preventDefault());
  $("schedule-form").addEventListener("submit", (event) => event.preventDefault());
  $("version-form").addEventListener("submit", (event) => event.preventDefault());
  $("do-cancel").addEventListener("click", () => act("cancel"));
  $("do-resolve").addEventListener("click", () => act("resolve"));
  $("do-abandon").addEventListener("click", () => act("abandon"));
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    refresh();
  });
  if (token()) refresh(); else showLogin("");
}

document.addEventListener("DOMContentLoaded", start);
