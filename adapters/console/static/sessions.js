// Xpert Gateway console: the Sessions page. Live and recent sessions from the admin API
// (/v1.0, bearer admin.token: asked once, kept in this tab's sessionStorage), each opening its
// audit trail as a timeline per turn; when the admin API is off (the console's api/config says
// so) the page says that instead of asking for a token, and offers the config lines that turn it
// on with a token made in the tab, which it then uses by itself. Plain JS, no build step.
(() => {
  "use strict";
  const { $, el } = window.xgwDom;
  const TOKEN_KEY = "xgw.adminToken";
  const PENDING_KEY = "xgw.snippetToken"; // the token the admin-off view offered
  const OFF_POLL_MS = 2000;
  const OUTCOMES = ["done", "error", "cancelled", "interrupted", "handback", "gave_up", "refused"];
  const MARK = { done: "✓", failed: "✗", cancelled: "–", running: "…" };
  const REFRESH_MS = 5000;
  const MAX_LIMIT = 1000;  // the admin API answers at most 1000 sessions
  // Sessions per page (and per "Older sessions" click): 100, or the page's ?pageSize=N (1-1000).
  const PAGE = (() => {
    const n = Number(new URLSearchParams(location.search).get("pageSize"));
    return Number.isInteger(n) && n >= 1 && n <= MAX_LIMIT ? n : 100;
  })();
  const state = { open: null, sessions: [], timer: null, gen: 0, run: 0, integrations: new Set(), limit: PAGE };

  class ApiError extends Error {
    constructor(status, code, msg) { super(msg); this.status = status; this.code = code; }
  }

  // ---- the admin API ---------------------------------------------------------------------
  async function admin(path, params) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) throw new ApiError(401, "unauthorized", "The admin token is needed.");
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v) query.set(k, v);
    const url = "/v1.0/" + path + (query.toString() ? "?" + query : "");
    const res = await fetch(url, { headers: { Authorization: "Bearer " + token } });
    let body = null;
    try { body = await res.json(); } catch (_) { /* not JSON: an unknown route */ }
    if (!res.ok || !body || !body.success) {
      throw new ApiError(res.status, body && body.code, (body && body.msg) || `HTTP ${res.status}`);
    }
    return body.result;
  }

  // ---- formatting ------------------------------------------------------------------------
  function when(ms) {
    if (!ms) return "–";
    const d = new Date(ms);
    const today = new Date().toDateString() === d.toDateString();
    return today ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" })
      : d.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  }
  function duration(ms) {
    if (ms == null) return "–";
    if (ms < 1000) return `${ms} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
    return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  }
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many || one + "s"}`;
  function badge(outcome) {
    const b = el("span", "outcome", outcome ? outcome.replace("_", " ") : "running");
    b.dataset.outcome = outcome || "running";
    return b;
  }
  function triggerText(t) {
    if (!t) return "message";
    if (t.kind === "button") return `button: ${t.action || "?"}`;
    if (t.kind === "event") return `event: ${t.source || ""}${t.id ? " (" + t.id + ")" : ""}`;
    if (t.id) return `${t.kind}: ${t.id}`;
    return t.kind;
  }

  // ---- views -----------------------------------------------------------------------------
  function show(view) {
    const sessions = view === "sessions";
    $("#chat-view").hidden = sessions;
    $("#sessions-view").hidden = !sessions;
    for (const a of document.querySelectorAll(".views a")) a.classList.toggle("active", a.dataset.view === view);
    document.querySelector(".app").dataset.view = view;
    stopPolling();
    if (sessions) start();
  }
  function route() {
    const m = location.hash.match(/^#sessions(?:\/(.+))?$/);
    if (!m) { show("chat"); return; }
    state.open = m[1] ? decodeURIComponent(m[1]) : null;
    show("sessions");
  }

  function needToken(message) {
    stopPolling();
    $("#sessions-body").hidden = true;
    $("#admin-off").hidden = true;
    $("#token-form").hidden = false;
    $("#token-error").textContent = message || "";
    $("#token").focus();
  }
  // With the admin API off, the page offers the config lines that turn it on, with a token
  // made here (kept in this tab), and watches api/config: once a reload or restart turned the
  // API on, it signs in with that token by itself.
  function snippetToken() {
    let token = sessionStorage.getItem(PENDING_KEY);
    if (!token) {
      const bytes = crypto.getRandomValues(new Uint8Array(24));
      token = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
      sessionStorage.setItem(PENDING_KEY, token);
    }
    return token;
  }
  function adminOff() {
    stopPolling();
    $("#token-form").hidden = true;
    $("#sessions-body").hidden = true;
    $("#admin-off").hidden = false;
    const token = snippetToken();
    $("#admin-snippet").textContent = `admin:\n  token: ${token}`;
    const run = state.run;
    state.timer = setInterval(async () => {
      if (!(await adminApiOn()) || run !== state.run) return;
      if (!sessionStorage.getItem(TOKEN_KEY)) sessionStorage.setItem(TOKEN_KEY, token);
      start();
    }, OFF_POLL_MS);
  }
  async function copySnippet() {
    const text = $("#admin-snippet").textContent;
    try {
      await navigator.clipboard.writeText(text);
      $("#admin-copy").textContent = "Copied";
    } catch (_) { // no clipboard here: select the lines for Ctrl-C
      getSelection().selectAllChildren($("#admin-snippet"));
    }
  }
  function failed(e) {
    if (e.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      needToken(e.message === "The admin token is needed." ? "" : "That token was refused.");
    } else if (e.status === 404 && e.code === "admin_disabled") {
      adminOff();
    } else {
      $("#sessions-error").textContent = e.message;
      $("#sessions-error").hidden = false;
    }
  }

  // One poll timer at most: a second sign-in (after a refused token) or a second visit must not
  // add a timer, or the list is redrawn twice every period - and a click landing between two
  // redraws is lost.
  function stopPolling() {
    clearInterval(state.timer);
    state.timer = null;
    state.run++; // a start() still waiting for api/config must not start polling after this
  }
  // Whether the admin API is on, from the console's own config: no token is needed to know.
  // Asked each time the page opens, as a reload may set or remove admin.token.
  async function adminApiOn() {
    try {
      const res = await fetch("api/config", { cache: "no-store" });
      if (!res.ok) return true; // not known: ask for the token, and the API will tell
      return (await res.json()).adminApi !== false;
    } catch (_) {
      return true;
    }
  }
  async function start() {
    stopPolling();
    const run = state.run;
    const on = await adminApiOn();
    if (run !== state.run) return; // left the page, or started again, meanwhile
    if (!on) { adminOff(); return; }
    $("#admin-off").hidden = true;
    if (!sessionStorage.getItem(TOKEN_KEY)) { needToken(""); return; }
    $("#token-form").hidden = true;
    $("#sessions-body").hidden = false;
    state.timer = setInterval(refresh, REFRESH_MS);
    await refresh();
  }

  async function refresh() {
    const gen = ++state.gen;
    try {
      await loadList(gen);
      if (state.open) await loadTrail(state.open, gen);
      else renderTrailEmpty();
      if (gen === state.gen) $("#sessions-error").hidden = true;
    } catch (e) {
      if (gen === state.gen) failed(e);
    }
  }

  // ---- the listing -----------------------------------------------------------------------
  function filters() {
    return {
      integrationId: $("#f-integration").value,
      chatId: $("#f-chat").value.trim(),
      outcome: $("#f-outcome").value,
      status: $("#f-status").value,
      q: $("#f-q").value.trim(),
    };
  }
  // Archived sessions (the archive database) come after Redis' in the same list: "Older"
  // asks for the next page (limit= grows by PAGE).
  async function loadList(gen) {
    const list = await admin("sessions", { ...filters(), limit: String(state.limit) });
    if (gen !== state.gen) return;
    state.sessions = list;
    $("#sessions-more").hidden = list.length < state.limit || state.limit >= MAX_LIMIT;
    for (const s of list) state.integrations.add(s.integrationId);
    renderIntegrations();
    renderList();
  }
  function renderIntegrations() {
    const sel = $("#f-integration");
    const have = new Set([...sel.options].map((o) => o.value));
    for (const id of [...state.integrations].sort()) {
      if (!have.has(id)) sel.appendChild(el("option", null, id)).value = id;
    }
  }
  // A row whose cells would not change is kept as it is, not drawn again: a click whose press
  // and release straddle a redraw would otherwise land on two different elements and be lost.
  function renderList() {
    const body = $("#session-list tbody");
    $("#sessions-empty").hidden = state.sessions.length > 0;
    const kept = new Map([...body.children].map((tr) => [tr.dataset.key, tr]));
    const rows = state.sessions.map((s) => {
      const key = JSON.stringify([s.sessionId, s.integrationId, s.chatId, s.xpertId, s.live,
        s.lastOutcome, s.turns, when(s.lastActiveAt), when(s.createdAt)]);
      const tr = kept.get(key) || sessionRow(s);
      kept.delete(key);
      tr.dataset.key = key;
      tr.classList.toggle("active", s.sessionId === state.open);
      return tr;
    });
    const same = rows.length === body.children.length && rows.every((tr, i) => body.children[i] === tr);
    if (!same) body.replaceChildren(...rows);
  }
  function sessionRow(s) {
    const tr = el("tr");
    tr.dataset.sessionId = s.sessionId;
    tr.dataset.live = String(!!s.live);
    tr.tabIndex = 0;
    const chat = el("td", "chat");
    chat.append(el("span", "chat-id", s.chatId || "–"));
    if (s.live) chat.append(el("span", "live", "live"));
    const outcome = el("td");
    if (s.lastOutcome || s.live) outcome.appendChild(badge(s.lastOutcome || null));
    else outcome.textContent = "–";
    const active = el("td", "when", when(s.lastActiveAt));
    active.appendChild(el("small", null, "started " + when(s.createdAt)));
    tr.append(
      el("td", null, s.integrationId), chat, el("td", null, s.xpertId || "–"), outcome,
      el("td", "num", String(s.turns ?? 0)), active,
    );
    const open = () => { location.hash = "#sessions/" + encodeURIComponent(s.sessionId); };
    tr.addEventListener("click", open);
    tr.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
    return tr;
  }

  // ---- one session's trail ---------------------------------------------------------------
  function renderTrailEmpty() {
    const box = $("#trail");
    box.textContent = "";
    box.appendChild(el("div", "empty", "Open a session to see each turn: input → context → steps → answer."));
  }
  async function loadTrail(sessionId, gen) {
    const session = state.sessions.find((s) => s.sessionId === sessionId)
      || await admin("sessions/" + encodeURIComponent(sessionId));
    const turns = await admin("sessions/" + encodeURIComponent(sessionId) + "/audit");
    let usage = null;
    try {
      usage = await admin("usage", { integrationId: session.integrationId, chatId: session.chatId });
    } catch (e) {
      if (e.status === 401) throw e;
      usage = null; // no usage route (404) or none for this chat: the panel stays hidden
    }
    if (gen !== state.gen) return;
    renderTrail(session, turns, usage);
  }

  function renderTrail(session, turns, usage) {
    const box = $("#trail");
    const same = box.dataset.sessionId === session.sessionId;
    const keepScroll = same ? box.scrollTop : 0;
    box.textContent = "";
    box.dataset.sessionId = session.sessionId;
    const head = box.appendChild(el("header", "trail-head"));
    const title = head.appendChild(el("h2", null, `${session.integrationId} · ${session.chatId}`));
    if (session.live) title.appendChild(el("span", "live", "live"));
    head.appendChild(el("small", null,
      `Session ${session.sessionId} · expert ${session.xpertId || "–"} · started ${when(session.createdAt)} · `
      + plural(turns.length, "turn")));
    if (usage) box.appendChild(renderUsage(usage, session.chatId));
    if (!turns.length) box.appendChild(el("div", "empty", "No turn of this session has ended yet."));
    turns.forEach((t, i) => box.appendChild(renderTurn(t, i + 1)));
    box.scrollTop = keepScroll;
    // Newly opened: where the page scrolls as a whole (phone width), bring the trail up.
    if (!same && $("#sessions-body").scrollHeight > $("#sessions-body").clientHeight) {
      box.scrollIntoView({ block: "start" });
    }
  }

  function renderUsage(usage, chatId) {
    const panel = el("section", "usage");
    panel.id = "usage";
    panel.appendChild(el("h3", null, "Usage"));
    const chat = (usage.chats || []).find((c) => c.chatId === chatId) || {};
    const limits = usage.limits || {};
    const row = (label, used, limit) => {
      const d = panel.appendChild(el("div", "usage-row"));
      d.append(el("span", null, label), el("b", null, String(used ?? 0) + (limit ? ` / ${limit}` : "")));
    };
    row("Turns in the last hour", chat.turnsLastHour, limits.turnsPerHourPerChat);
    row("Tokens today", chat.tokensToday, limits.tokensPerDayPerChat);
    row("Refused today", chat.refusedToday, null);
    return panel;
  }

  function stage(name, cls) {
    const li = el("li", "stage " + (cls || name.toLowerCase()));
    li.dataset.stage = name.toLowerCase();
    li.appendChild(el("div", "stage-name", name));
    return li;
  }

  function renderTurn(t, n) {
    const art = el("article", "turn");
    art.dataset.turnId = t.turnId;
    art.dataset.outcome = t.outcome;
    const head = art.appendChild(el("header", "turn-head"));
    head.append(el("b", null, `Turn ${n}`), el("span", "trigger", triggerText(t.trigger)), badge(t.outcome),
      el("time", null, when(t.timings && t.timings.finishedAt)));
    if (t.resumed) head.appendChild(el("span", "tag", `resumed (attempt ${t.attempt})`));

    const flow = art.appendChild(el("ol", "flow"));
    // input
    const input = flow.appendChild(stage("Input"));
    input.appendChild(el("pre", "input-text", t.input ? t.input.text : ""));
    const meta = [t.senderId ? "from " + t.senderId : "", t.input ? plural(t.input.messages, "message") : ""];
    if (t.input && t.input.truncated) meta.push(`cut from ${t.input.chars} characters`);
    input.appendChild(el("div", "note", meta.filter(Boolean).join(" · ")));
    // context
    const ctx = flow.appendChild(stage("Context"));
    if (t.context) {
      const c = t.context;
      const facts = [plural(c.variableCount, "variable"), plural(c.history, "group message"),
        plural(c.memoryRules, "memory rule"),
        plural(c.attachments, "attachment") + (c.attachmentKinds.length ? ` (${c.attachmentKinds.join(", ")})` : "")];
      ctx.appendChild(el("div", "facts", facts.join(" · ")));
      if (c.variables.length) {
        const det = ctx.appendChild(el("details"));
        det.appendChild(el("summary", null, "Variable names"));
        det.appendChild(el("div", "names", c.variables.join(", ")));
      }
    } else ctx.appendChild(el("div", "note", "No context was built (the turn did not reach the expert)."));
    if (t.expert) {
      ctx.appendChild(el("div", "note", `Expert ${t.expert.id}` + (t.expert.kind ? ` (${t.expert.kind}` + (t.expert.model ? `, ${t.expert.model})` : ")") : "")));
    }
    // steps and tools
    const steps = flow.appendChild(stage("Steps"));
    if (t.steps && t.steps.length) {
      const ul = steps.appendChild(el("ul", "audit-steps"));
      for (const s of t.steps) {
        const li = ul.appendChild(el("li"));
        li.dataset.stepStatus = s.status;
        li.dataset.kind = s.kind;
        li.append(el("span", "mark", MARK[s.status] ?? "·"), el("span", "step-title", (s.kind === "tool" ? "🔧 " : "") + s.title),
          el("span", "dur", s.ms == null ? "earlier" : duration(s.ms)));
        li.title = s.status + (s.detail ? ": " + s.detail : "");
      }
    } else steps.appendChild(el("div", "note", "No steps."));
    // answer and outcome
    const end = flow.appendChild(stage("Answer", "answer-stage"));
    end.appendChild(badge(t.outcome));
    if (t.answer) end.appendChild(el("pre", "answer-text", t.answer));
    if (t.error) end.appendChild(el("div", "error", t.error));
    // timings and usage
    const tm = t.timings || {};
    const foot = art.appendChild(el("footer", "timings"));
    const fact = (label, value) => {
      const s = foot.appendChild(el("span", "timing"));
      s.dataset.timing = label;
      s.append(el("small", null, label), el("b", null, value));
    };
    fact("queued", duration(tm.queuedMs));
    fact("first card", duration(tm.firstCardMs));
    fact("run", duration(tm.runMs));
    fact("finished", when(tm.finishedAt));
    if (t.usage) {
      fact("tokens", `${t.usage.inputTokens} in / ${t.usage.outputTokens} out`);
      if (t.usage.cost != null) fact("cost", String(t.usage.cost));
    }
    fact("replica", t.replica || "–");
    return art;
  }

  // ---- start -----------------------------------------------------------------------------
  function init() {
    const outcome = $("#f-outcome");
    for (const o of OUTCOMES) outcome.appendChild(el("option", null, o.replace("_", " "))).value = o;
    $("#admin-copy").addEventListener("click", copySnippet);
    $("#token-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const value = $("#token").value.trim();
      if (!value) return;
      sessionStorage.setItem(TOKEN_KEY, value);
      $("#token").value = "";
      start();
    });
    $("#filters").addEventListener("submit", (e) => { e.preventDefault(); state.limit = PAGE; refresh(); });
    $("#sessions-more").addEventListener("click", () => {
      state.limit = Math.min(MAX_LIMIT, state.limit + PAGE);
      refresh();
    });
    for (const id of ["#f-integration", "#f-outcome", "#f-status"]) $(id).addEventListener("change", refresh);
    $("#sign-out").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      needToken("");
    });
    // A chat picked in the sidebar shows the chat again.
    $("#chats").addEventListener("click", () => { if (location.hash.startsWith("#sessions")) location.hash = "#chat"; });
    window.addEventListener("hashchange", route);
    route();
  }
  init();
})();
