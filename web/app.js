// tokenflow's playground: chat and completions against the server it is served by, through the
// same OpenAI-compatible routes any client uses. No framework and no third-party code; every
// piece of model or user text reaches the page through textContent or createTextNode (never
// innerHTML), so nothing a model writes can become markup or script. The server's
// Content-Security-Policy allows only this file's script.
"use strict";

const $ = (id) => document.getElementById(id);
const STORE = "tokenflow.conversations";
const SETTINGS = "tokenflow.settings";
const KEY = "tokenflow.apiKey";
const FIELDS = ["system", "temperature", "top_p", "top_k", "min_p", "max_tokens", "repetition_penalty",
  "presence_penalty", "frequency_penalty", "seed", "stop_strings", "logprobs", "format", "schema"];

const state = {
  conversations: [],
  current: null,     // the open conversation's id
  controller: null,  // the AbortController of the request in flight
  models: [],
};

// ---- storage ------------------------------------------------------------------------------

function load(name, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(name));
    return v === null ? fallback : v;
  } catch {
    return fallback;
  }
}

function saveConversations() {
  localStorage.setItem(STORE, JSON.stringify(state.conversations));
}

function saveSettings() {
  const s = {};
  for (const f of FIELDS) s[f] = $(f).type === "checkbox" ? $(f).checked : $(f).value;
  s.model = $("model").value;
  s.mode = mode();
  localStorage.setItem(SETTINGS, JSON.stringify(s));
}

function restoreSettings() {
  const s = load(SETTINGS, {});
  for (const f of FIELDS) {
    if (!(f in s)) continue;
    if ($(f).type === "checkbox") $(f).checked = !!s[f];
    else $(f).value = s[f];
  }
  if (s.mode === "completion") $("mode-completion").checked = true;
  $("schema-label").hidden = $("format").value !== "json_schema";
  return s;
}

function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

// ---- safe rendering -----------------------------------------------------------------------

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// Inline markdown: `code`, **bold**, *emphasis*, [text](http(s) link). Built from text nodes.
function inline(parent, text) {
  const re = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\n]+\*)|(\[[^\]\n]+\]\((https?:\/\/[^\s)]+)\))/g;
  let last = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
    const s = m[0];
    if (m[1]) parent.appendChild(el("code", "", s.slice(1, -1)));
    else if (m[2]) parent.appendChild(el("strong", "", s.slice(2, -2)));
    else if (m[3]) parent.appendChild(el("em", "", s.slice(1, -1)));
    else {
      const a = el("a", "", s.slice(1, s.indexOf("](")));
      a.href = m[5];  // only http(s): the pattern admits nothing else (no javascript: URLs)
      a.rel = "noopener noreferrer";
      a.target = "_blank";
      parent.appendChild(a);
    }
    last = m.index + s.length;
  }
  if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
}

// Block markdown: fenced code, headings, lists, quotes, paragraphs.
function markdown(text) {
  const root = document.createDocumentFragment();
  const lines = text.split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^```\s*([\w+-]*)\s*$/);
    if (fence) {
      const code = [];
      for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++) code.push(lines[i]);
      i++;
      const pre = el("pre");
      const c = el("code", fence[1] ? "language-" + fence[1] : "", code.join("\n"));
      pre.appendChild(c);
      root.appendChild(pre);
      continue;
    }
    const h = line.match(/^(#{1,6})\s+(.*)$/);
    if (h) {
      const e = el("h" + Math.min(6, h[1].length + 2));
      inline(e, h[2]);
      root.appendChild(e);
      i++;
      continue;
    }
    const item = /^\s*([-*+]|\d+[.)])\s+/;
    if (item.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? "ol" : "ul");
      for (; i < lines.length && item.test(lines[i]); i++) {
        const li = el("li");
        inline(li, lines[i].replace(item, ""));
        list.appendChild(li);
      }
      root.appendChild(list);
      continue;
    }
    if (/^>\s?/.test(line)) {
      const q = el("blockquote");
      const quoted = [];
      for (; i < lines.length && /^>\s?/.test(lines[i]); i++) quoted.push(lines[i].replace(/^>\s?/, ""));
      inline(q, quoted.join("\n"));
      root.appendChild(q);
      continue;
    }
    if (line.trim() === "") {
      i++;
      continue;
    }
    const para = [];
    for (; i < lines.length && lines[i].trim() !== "" && !/^(```|#{1,6}\s|>|\s*([-*+]|\d+[.)])\s)/.test(lines[i]); i++)
      para.push(lines[i]);
    const p = el("p");
    inline(p, para.join("\n"));
    root.appendChild(p);
  }
  return root;
}

// A message's text as token spans carrying their probabilities (logprobs), or as markdown.
function renderBody(body, msg) {
  body.replaceChildren();
  if (msg.tokens && msg.tokens.length) {
    for (const t of msg.tokens) {
      const span = el("span", "tok", t.token);
      const p = Math.exp(t.logprob);
      // Less likely tokens are shaded: the eye finds where the model hesitated.
      span.style.background = `rgba(255, 170, 0, ${Math.min(0.55, (1 - p) * 0.55).toFixed(3)})`;
      span.tok = t;
      body.appendChild(span);
    }
    const shown = msg.tokens.map((t) => t.token).join("");
    if (msg.content.length > shown.length) body.appendChild(document.createTextNode(msg.content.slice(shown.length)));
    return;
  }
  if (msg.role === "assistant") body.appendChild(markdown(msg.content));
  else body.textContent = msg.content;
}

function messageNode(msg) {
  const div = el("div", `message ${msg.role}` + (msg.tokens ? " tokens" : ""));
  div.appendChild(el("span", "role", msg.role));
  const body = el("div", "body");
  div.appendChild(body);
  renderBody(body, msg);
  return div;
}

function showTooltip(span, x, y) {
  const t = span.tok;
  const tip = $("tooltip");
  const table = el("table");
  const rows = (t.top_logprobs && t.top_logprobs.length) ? t.top_logprobs : [{ token: t.token, logprob: t.logprob }];
  if (!rows.some((r) => r.token === t.token)) rows.push({ token: t.token, logprob: t.logprob });
  for (const r of rows) {
    const tr = el("tr", r.token === t.token ? "chosen" : "");
    tr.appendChild(el("td", "", JSON.stringify(r.token)));
    tr.appendChild(el("td", "", (100 * Math.exp(r.logprob)).toFixed(2) + "%"));
    table.appendChild(tr);
  }
  tip.replaceChildren(table);
  tip.hidden = false;
  tip.style.left = Math.min(x + 12, window.innerWidth - 360) + "px";
  tip.style.top = (y + 16) + "px";
}

// ---- conversations ------------------------------------------------------------------------

function conversation() {
  return state.conversations.find((c) => c.id === state.current);
}

function newConversation() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", messages: [], created: Date.now() };
  state.conversations.unshift(c);
  state.current = c.id;
  saveConversations();
  renderConversations();
  renderMessages();
}

function renderConversations() {
  const list = $("conversation-list");
  list.replaceChildren();
  for (const c of state.conversations) {
    const li = el("li", c.id === state.current ? "active" : "");
    const open = el("button", "open", c.title);
    open.type = "button";
    open.addEventListener("click", () => {
      if (state.controller) return;
      state.current = c.id;
      renderConversations();
      renderMessages();
    });
    const del = el("button", "delete", "×");
    del.type = "button";
    del.title = "Delete";
    del.setAttribute("aria-label", "delete " + c.title);
    del.addEventListener("click", () => {
      if (state.controller) return;
      state.conversations = state.conversations.filter((x) => x !== c);
      if (state.current === c.id) state.current = state.conversations[0]?.id || null;
      saveConversations();
      if (!state.current) newConversation();
      renderConversations();
      renderMessages();
    });
    li.append(open, del);
    list.appendChild(li);
  }
}

function renderMessages() {
  const box = $("messages");
  box.replaceChildren();
  const c = conversation();
  if (!c) return;
  for (const m of c.messages) box.appendChild(messageNode(m));
  box.parentElement.scrollTop = box.parentElement.scrollHeight;
}

// ---- the server ---------------------------------------------------------------------------

function headers() {
  const h = { "Content-Type": "application/json" };
  const k = apiKey();
  if (k) h.Authorization = "Bearer " + k;
  return h;
}

function setStatus(text, error) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
}

async function loadModels() {
  let r;
  try {
    r = await fetch("/v1/models", { headers: headers() });
  } catch (e) {
    setStatus("cannot reach the server: " + e.message, true);
    return;
  }
  if (r.status === 401) {
    $("key-form").hidden = false;
    setStatus(apiKey() ? "that API key was refused" : "this server needs an API key", true);
    $("model").replaceChildren();
    return;
  }
  if (!r.ok) {
    setStatus(`listing models failed (${r.status})`, true);
    return;
  }
  const body = await r.json();
  state.models = body.data;
  const select = $("model");
  const keep = select.value || load(SETTINGS, {}).model;
  select.replaceChildren();
  for (const m of body.data) {
    const o = el("option", "", m.parent ? m.id : `${m.id} (v${m.version})`);
    o.value = m.id;
    select.appendChild(o);
  }
  if (keep && body.data.some((m) => m.id === keep)) select.value = keep;
  setStatus(body.data.length ? `${body.data.length} model${body.data.length > 1 ? "s" : ""}` : "no models available", !body.data.length);
}

function mode() {
  return $("mode-completion").checked ? "completion" : "chat";
}

function number(id) {
  const v = $(id).value.trim();
  return v === "" ? undefined : Number(v);
}

// The request's sampling parameters and output format, as the settings say.
function parameters() {
  const p = { model: $("model").value, stream: true, stream_options: { include_usage: true } };
  for (const f of ["temperature", "top_p", "top_k", "min_p", "max_tokens", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed"]) {
    const v = number(f);
    if (v !== undefined && !Number.isNaN(v)) p[f] = v;
  }
  const stops = $("stop_strings").value.split(",").map((s) => s.trim()).filter((s) => s);
  if (stops.length) p.stop = stops;
  const format = $("format").value;
  if (format === "json_object") p.response_format = { type: "json_object" };
  if (format === "json_schema") {
    let schema;
    try {
      schema = JSON.parse($("schema").value);
    } catch (e) {
      throw new Error("the schema is not valid JSON: " + e.message);
    }
    p.response_format = { type: "json_schema", json_schema: { name: "output", schema, strict: true } };
  }
  return p;
}

// Reads an SSE body, calling onEvent with each data payload's JSON.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onEvent(JSON.parse(data));
      }
    }
  }
}

function errorText(status, body) {
  try {
    return JSON.parse(body).error.message;
  } catch {
    return `HTTP ${status}`;
  }
}

// Live speed: time to the first token, then tokens per second of decoding.
class Meter {
  constructor() {
    this.start = performance.now();
    this.first = null;
    this.last = null;
    this.tokens = 0;
    this.show();
  }
  token(n) {
    const now = performance.now();
    if (this.first === null) this.first = now;
    this.last = now;
    this.tokens += n;
    this.show();
  }
  usage(u) {
    if (u && u.completion_tokens !== undefined) this.tokens = u.completion_tokens;
    this.show();
  }
  show() {
    $("ttft").textContent = this.first === null ? "TTFT –" : `TTFT ${Math.round(this.first - this.start)} ms`;
    const span = this.first === null ? 0 : (this.last - this.first) / 1000;
    $("tps").textContent = this.tokens > 1 && span > 0 ? `${((this.tokens - 1) / span).toFixed(1)} tok/s` : "– tok/s";
    $("ntokens").textContent = `${this.tokens} token${this.tokens === 1 ? "" : "s"}`;
  }
}

function busy(on) {
  $("send").disabled = on;
  $("stop").disabled = !on;
  $("model").disabled = on;
  document.body.dataset.busy = on ? "1" : "";
}

async function stream(url, body, onChunk) {
  state.controller = new AbortController();
  busy(true);
  const meter = new Meter();
  let stopped = false;
  try {
    const r = await fetch(url, { method: "POST", headers: headers(), body: JSON.stringify(body), signal: state.controller.signal });
    if (!r.ok) {
      const text = await r.text();
      if (r.status === 401) $("key-form").hidden = false;
      throw new Error(errorText(r.status, text));
    }
    await readEvents(r, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) meter.usage(chunk.usage);
      for (const choice of chunk.choices || []) onChunk(choice, meter);
    });
  } catch (e) {
    if (e.name === "AbortError") stopped = true;
    else throw e;
  } finally {
    state.controller = null;
    busy(false);
  }
  return stopped;
}

async function sendChat(text) {
  const c = conversation();
  const user = { role: "user", content: text };
  c.messages.push(user);
  if (c.title === "New chat") c.title = text.slice(0, 40);
  saveConversations();
  renderConversations();
  $("messages").appendChild(messageNode(user));
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  for (const m of c.messages) messages.push({ role: m.role, content: m.content });
  const body = Object.assign(parameters(), { messages });
  const withLogprobs = $("logprobs").checked;
  if (withLogprobs) Object.assign(body, { logprobs: true, top_logprobs: 5 });
  const reply = { role: "assistant", content: "", model: body.model };
  if (withLogprobs) reply.tokens = [];
  const node = messageNode(reply);
  $("messages").appendChild(node);
  const view = $("chat-view");
  try {
    const stopped = await stream("/v1/chat/completions", body, (choice, meter) => {
      const delta = choice.delta || {};
      const piece = (delta.reasoning_content || "") + (delta.content || "");
      const lps = choice.logprobs && choice.logprobs.content;
      if (piece) {
        reply.content += piece;
        meter.token(lps && lps.length ? lps.length : 1);
      }
      if (reply.tokens && lps) for (const t of lps) reply.tokens.push(t);
      if (choice.finish_reason) reply.finish = choice.finish_reason;
      renderBody(node.querySelector(".body"), reply);
      view.scrollTop = view.scrollHeight;
    });
    if (stopped) reply.finish = "stopped";
    node.dataset.finish = reply.finish || "";
    if (stopped) node.querySelector(".role").after(el("span", "note", "stopped"));
    c.messages.push(reply);
  } catch (e) {
    node.remove();
    $("messages").appendChild(messageNode({ role: "error", content: e.message }));
  }
  saveConversations();
}

async function sendCompletion() {
  const prompt = $("completion-prompt").value;
  const out = $("completion-output");
  const body = Object.assign(parameters(), { prompt });
  const withLogprobs = $("logprobs").checked;
  if (withLogprobs) body.logprobs = 5;
  const msg = { role: "assistant", content: "", tokens: withLogprobs ? [] : null };
  out.replaceChildren();
  out.className = "message assistant" + (withLogprobs ? " tokens" : "");
  const bodyNode = el("div", "body");
  out.appendChild(bodyNode);
  try {
    const stopped = await stream("/v1/completions", body, (choice, meter) => {
      if (choice.text) {
        msg.content += choice.text;
        const lp = choice.logprobs;
        meter.token(lp && lp.tokens ? lp.tokens.length : 1);
        if (msg.tokens && lp && lp.tokens) {
          lp.tokens.forEach((token, i) => {
            const top = Object.entries(lp.top_logprobs[i] || {}).map(([t, l]) => ({ token: t, logprob: l }))
              .sort((a, b) => b.logprob - a.logprob);
            msg.tokens.push({ token, logprob: lp.token_logprobs[i], top_logprobs: top });
          });
        }
      }
      renderBody(bodyNode, Object.assign({}, msg, { tokens: msg.tokens, role: "completion" }));
    });
    out.dataset.finish = stopped ? "stopped" : "done";
  } catch (e) {
    out.replaceChildren(el("div", "body", e.message));
    out.className = "message error";
  }
}

// ---- wiring -------------------------------------------------------------------------------

function switchMode() {
  const completion = mode() === "completion";
  $("chat-view").hidden = completion;
  $("completion-view").hidden = !completion;
  $("conversations").style.visibility = completion ? "hidden" : "visible";
  $("prompt").hidden = completion;
  saveSettings();
}

function init() {
  restoreSettings();
  state.conversations = load(STORE, []);
  state.current = state.conversations[0]?.id || null;
  if (!state.current) newConversation();
  renderConversations();
  renderMessages();
  switchMode();
  for (const f of FIELDS) $(f).addEventListener("change", saveSettings);
  $("format").addEventListener("change", () => { $("schema-label").hidden = $("format").value !== "json_schema"; });
  $("model").addEventListener("change", saveSettings);
  $("mode-chat").addEventListener("change", switchMode);
  $("mode-completion").addEventListener("change", switchMode);
  $("new-chat").addEventListener("click", () => { if (!state.controller) newConversation(); });
  $("stop").addEventListener("click", () => { if (state.controller) state.controller.abort(); });
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, $("api-key").value.trim());
    loadModels();
  });
  $("composer").addEventListener("submit", async (e) => {
    e.preventDefault();
    if (state.controller) return;
    if (mode() === "completion") return sendCompletion();
    const text = $("prompt").value.trim();
    if (!text) return;
    $("prompt").value = "";
    await sendChat(text);
  });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  document.addEventListener("mouseover", (e) => {
    if (e.target.classList && e.target.classList.contains("tok")) showTooltip(e.target, e.clientX, e.clientY);
  });
  document.addEventListener("mouseout", (e) => {
    if (e.target.classList && e.target.classList.contains("tok")) $("tooltip").hidden = true;
  });
  if (apiKey()) $("api-key").value = apiKey();
  loadModels();
}

init();
