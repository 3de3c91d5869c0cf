// Xpert Gateway console: a tiny IM emulator. Plain JS, no build step.
(() => {
  "use strict";
  const { $, el } = window.xgwDom;
  // A step's mark: ✓ only once the step is done; a running step shows a spinner instead.
  const STEP_MARK = { done: "✓", failed: "✗", cancelled: "–" };
  const STEP_WORD = { running: "running", done: "done", failed: "failed", cancelled: "stopped" };

  const state = {
    integ: null, userId: null, chatId: null,
    gen: 0, loading: false, buffered: [], unread: new Set(), es: null,
  };

  // ---- helpers -------------------------------------------------------------------------
  async function api(method, path, body) {
    const res = await fetch(path, {
      method, headers: body ? { "Content-Type": "application/json" } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    let data = null;
    try { data = await res.json(); } catch (_) { /* empty body */ }
    if (!res.ok) throw new Error((data && data.error) || `${method} ${path}: HTTP ${res.status}`);
    return data;
  }
  let toastTimer = null;
  function toast(msg) {
    // At the top of the page (never over the composer), gone after 6 s or when clicked.
    const t = $("#toast");
    t.textContent = msg;
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, 6000);
  }
  const chat = (id) => state.integ.chats.find((c) => c.id === id);
  const user = (id) => state.integ.users.find((u) => u.id === id);
  function timeOf(at) {
    if (at == null) return "";
    const d = typeof at === "number" ? new Date(at < 1e12 ? at * 1000 : at) : new Date(at);
    return isNaN(d) ? "" : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }
  // Markdown as the platforms' cards show it (markdown.js): DOM nodes, never HTML.
  const richText = (text) => window.xgwMarkdown(text);

  // ---- rendering -----------------------------------------------------------------------
  function renderUser(r) {
    const row = el("div", "msg user");
    if (r.senderId === state.userId) row.classList.add("mine");
    row.dataset.sender = r.senderId || "";
    const av = row.appendChild(el("div", "avatar", (r.senderName || r.senderId || "?").slice(0, 1).toUpperCase()));
    av.style.setProperty("--h", [...(r.senderId || "")].reduce((h, ch) => (h * 31 + ch.charCodeAt(0)) % 360, 200));
    const body = row.appendChild(el("div", "body"));
    const meta = body.appendChild(el("div", "meta"));
    meta.append(el("b", null, r.senderName || r.senderId), el("time", null, timeOf(r.at)));
    const bubble = body.appendChild(el("div", "bubble"));
    if (r.mentionBot) bubble.appendChild(el("span", "tag", "@" + state.integ.botName));
    bubble.append(r.text || "");
    return row;
  }
  function renderCard(r) {
    const c = r.card || {};
    const status = c.status || "running";
    const card = el("div", "card");
    card.dataset.status = status;
    const head = card.appendChild(el("div", "card-head"));
    // The status is said once: the title is the status, except while the card asks a
    // question (the title is the question; the status goes beside it).
    const title = c.title || c.statusText || status;
    head.append(el("span", "dot"), el("span", "card-title", title));
    if (c.statusText && c.statusText !== title) head.append(el("span", "pill", c.statusText));
    if (c.steps && c.steps.length) {
      const ul = card.appendChild(el("ul", "steps"));
      for (const s of c.steps) {
        const li = ul.appendChild(el("li"));
        li.dataset.stepStatus = s.status;
        li.title = STEP_WORD[s.status] || s.status;
        const mark = li.appendChild(el("span", "mark", STEP_MARK[s.status] ?? ""));
        if (s.status === "running") mark.appendChild(el("i", "spinner"));
        li.appendChild(el("span", null, s.title));
      }
    }
    if (c.answer) card.appendChild(richText(c.answer)).classList.add("answer");
    if (c.error) card.appendChild(el("div", "error", c.error));
    if (c.buttons && c.buttons.length) {
      const bar = card.appendChild(el("div", "actions"));
      for (const b of c.buttons) {
        const btn = bar.appendChild(el("button", "btn btn-" + (b.style || "default"), b.label));
        btn.type = "button";
        btn.dataset.actionId = b.actionId;
        btn.addEventListener("click", () => act(r, b.actionId, btn));
      }
    }
    return card;
  }
  function renderRecord(r) {
    let row;
    if (r.role === "user") row = renderUser(r);
    else {
      row = el("div", "msg bot");
      row.appendChild(el("div", "avatar bot-avatar", "X"));
      const body = row.appendChild(el("div", "body"));
      const meta = body.appendChild(el("div", "meta"));
      meta.append(el("b", null, state.integ.botName), el("time", null, timeOf(r.at)));
      if (r.type === "card") {
        body.appendChild(renderCard(r));
        row.dataset.conversation = r.conversation || r.id;
      } else if (r.type === "file" && r.file && r.file.url) {
        // an answer too long for the transcript, whole: a download (adapters/console/outbound.py)
        const link = body.appendChild(el("a", "bubble file", r.text));
        link.href = r.file.url;
        link.download = r.file.name;
      } else body.appendChild(richText(r.text)).classList.add("bubble");
      if (r.replyTo) row.dataset.replyTo = r.replyTo;
    }
    row.dataset.messageId = r.id;
    row.dataset.role = r.role;
    return row;
  }
  function upsert(r) {
    // Changes are applied in the order they arrive: Redis publishes them in the order they
    // were written and the event stream keeps it (a card's version is no clock: a card that
    // Retry or Confirm carries on may count again from 0).
    const tl = $("#timeline");
    const nearBottom = tl.scrollHeight - tl.scrollTop - tl.clientHeight < 80;
    const node = renderRecord(r);
    const existing = tl.querySelector(`[data-message-id="${CSS.escape(r.id)}"]`);
    if (existing) existing.replaceWith(node); else tl.appendChild(node);
    $("#empty")?.remove();
    markCurrent();
    if (nearBottom || !existing) tl.scrollTop = tl.scrollHeight;
  }
  function markCurrent() {
    // Only the latest card of a conversation takes clicks: an older card's "New conversation"
    // or "Stop" would act on whatever the conversation is doing now.
    const seen = new Set();
    const rows = [...document.querySelectorAll("#timeline .msg[data-conversation]")].reverse();
    for (const row of rows) {
      const stale = seen.has(row.dataset.conversation);
      seen.add(row.dataset.conversation);
      const card = row.querySelector(".card");
      if (!card || (card.dataset.stale === "true") === stale) continue;
      card.dataset.stale = String(stale);
      for (const btn of card.querySelectorAll(".actions .btn")) {
        btn.disabled = stale;
        btn.title = stale ? "A newer card answers this conversation" : "";
      }
    }
  }

  // ---- chats ---------------------------------------------------------------------------
  function renderChats() {
    const ul = $("#chats");
    ul.textContent = "";
    for (const c of state.integ.chats) {
      const li = ul.appendChild(el("li"));
      li.dataset.chatId = c.id;
      li.classList.toggle("active", c.id === state.chatId);
      li.classList.toggle("unread", state.unread.has(c.id));
      li.append(el("span", "chat-icon " + c.type, c.type === "group" ? "#" : "@"), el("span", "chat-name", c.name));
      li.addEventListener("click", () => selectChat(c.id));
    }
  }
  function selectChat(id) {
    const c = chat(id);
    if (!c) return;
    state.chatId = id;
    state.unread.delete(id);
    if (c.type === "p2p" && c.userId && user(c.userId)) setUser(c.userId);
    $("#chat-title").textContent = c.name;
    $("#chat-sub").textContent = c.type === "group"
      ? "Group chat · the bot answers when @mentioned" : "Direct chat with " + state.integ.botName;
    $("#mention-label").classList.toggle("off", c.type !== "group");
    $("#mention").disabled = c.type !== "group";
    renderChats();
    loadTimeline();
    $("#composer").focus();
  }
  function setUser(id) {
    state.userId = id;
    $("#user").value = id;
    for (const row of document.querySelectorAll(".msg.user")) row.classList.toggle("mine", row.dataset.sender === id);
  }
  async function loadTimeline() {
    const gen = ++state.gen;
    const chatId = state.chatId;
    state.loading = true;
    state.buffered = [];
    try {
      const data = await api("GET", `api/chats/${encodeURIComponent(chatId)}/messages?integrationId=${encodeURIComponent(state.integ.id)}`);
      if (gen !== state.gen) return; // a newer load started
      const tl = $("#timeline");
      tl.textContent = "";
      const msgs = data.messages || [];
      if (!msgs.length) tl.appendChild(el("div", "empty", "No messages yet. Say hello!")).id = "empty";
      for (const r of msgs) upsert(r);
      for (const r of state.buffered) upsert(r);
      tl.scrollTop = tl.scrollHeight;
    } catch (e) {
      if (gen === state.gen) toast(e.message);
    } finally {
      if (gen === state.gen) { state.loading = false; state.buffered = []; }
    }
  }

  // ---- live updates --------------------------------------------------------------------
  // "Live" means both: the event stream is open, and the gateway says it is ready (/readyz:
  // its Redis reachable, its integrations up). A stream the gateway keeps open while it lost
  // its Redis is not live: nothing sent now would be answered.
  const READY_POLL_MS = 3000;
  const conn = { stream: false, ready: null, why: "" };
  function showConn() {
    const box = $("#conn");
    let [look, text] = ["live", "Live"];
    if (!conn.stream) [look, text] = ["down", "Reconnecting…"];
    else if (conn.ready === null) [look, text] = ["connecting", "Connecting…"];
    else if (!conn.ready) [look, text] = ["down", conn.why];
    box.dataset.state = look;
    box.lastChild.textContent = text;
  }
  function notReady(body) {
    if (body.stopping) return "Gateway stopping";
    const checks = body.checks || {};
    if (checks.redis && !checks.redis.ready) return "Redis unreachable";
    const down = Object.keys(checks).filter((k) => checks[k] && checks[k].ready === false);
    return down.length ? `Not ready: ${down.join(", ")}` : "Gateway not ready";
  }
  async function checkReady() {
    try {
      const res = await fetch("../readyz", { cache: "no-store" });
      if (res.status !== 200 && res.status !== 503) {
        conn.ready = true; // readiness not ours to see (e.g. behind a proxy): the stream decides
      } else {
        const body = await res.json();
        conn.ready = !!body.ready;
        if (!conn.ready) conn.why = notReady(body);
      }
    } catch (_) {
      conn.ready = false;
      conn.why = "Gateway unreachable";
    }
    showConn();
  }
  setInterval(() => { if (!document.hidden) checkReady(); }, READY_POLL_MS);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) checkReady(); });

  function connect() {
    const es = new EventSource(`api/events?integrationId=${encodeURIComponent(state.integ.id)}`);
    state.es = es;
    es.addEventListener("open", () => {
      conn.stream = true;
      showConn();
      checkReady();
      loadTimeline(); // catch up on anything missed while disconnected
    });
    es.addEventListener("error", () => {
      conn.stream = false;
      showConn();
    });
    es.addEventListener("record", (ev) => {
      let msg;
      try { msg = JSON.parse(ev.data); } catch (_) { return; }
      if (!msg.record || (msg.integrationId && msg.integrationId !== state.integ.id)) return;
      if (msg.chatId !== state.chatId) {
        state.unread.add(msg.chatId);
        renderChats();
      } else if (state.loading) state.buffered.push(msg.record);
      else upsert(msg.record);
    });
  }

  // ---- actions -------------------------------------------------------------------------
  async function send() {
    const box = $("#composer");
    const text = box.value.trim();
    if (!text) return;
    const c = chat(state.chatId);
    const u = user(state.userId);
    $("#send").disabled = true;
    try {
      await api("POST", "api/messages", {
        integrationId: state.integ.id, chatId: c.id, chatType: c.type,
        senderId: u.id, senderName: u.name, text,
        mentionBot: c.type === "group" ? $("#mention").checked : false,
      });
      box.value = "";
      autosize();
    } catch (e) {
      toast(e.message);
    } finally {
      $("#send").disabled = false;
      box.focus();
    }
  }
  async function act(r, actionId, btn) {
    btn.disabled = true;
    try {
      const answer = await api("POST", "api/actions", {
        integrationId: state.integ.id, chatId: state.chatId, messageId: r.id, actionId, senderId: state.userId,
      });
      if (answer && answer.notice) {  // refused (not this user's to answer): the card stays
        toast(answer.notice);
        btn.disabled = false;
      }
    } catch (e) {
      toast(e.message);
      btn.disabled = btn.closest(".card")?.dataset.stale === "true";
    }
  }
  function autosize() {
    const box = $("#composer");
    box.style.height = "auto";
    box.style.height = Math.min(box.scrollHeight, 160) + "px";
  }

  // ---- start ---------------------------------------------------------------------------
  async function init() {
    let cfg;
    try { cfg = await api("GET", "api/config"); } catch (e) { toast("Cannot load config: " + e.message); return; }
    state.integ = (cfg.integrations || [])[0];
    if (!state.integ) { toast("No console integration configured"); return; }
    state.integ.botName = state.integ.botName || "Xpert";
    const sel = $("#user");
    for (const u of state.integ.users) sel.appendChild(el("option", null, u.name)).value = u.id;
    state.userId = state.integ.users[0]?.id;
    sel.addEventListener("change", () => setUser(sel.value));
    $("#composer-form").addEventListener("submit", (e) => { e.preventDefault(); send(); });
    $("#composer").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
    });
    $("#composer").addEventListener("input", autosize);
    $("#toast").addEventListener("click", () => { $("#toast").hidden = true; });
    if (matchMedia("(max-width: 720px)").matches) $("#composer").placeholder = "Type a message…";
    const first = state.integ.chats.find((c) => c.type === "group") || state.integ.chats[0];
    if (first) selectChat(first.id);
    connect();
  }
  init();
})();
