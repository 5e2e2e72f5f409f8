// The chat page of `opal serve` (docs/server.md "Chat page").
//
// Talks to the server it was loaded from: GET /v1/models (the model's name),
// POST /v1/chat/completions with stream: true (SSE, read from fetch's body).
// Stop aborts the fetch; the server sees the connection close and frees the
// slot. The conversation and the settings are kept in localStorage. Replies
// are rendered by markdown.js, which escapes everything it is given.
// The page's state is mirrored in document.body.dataset.state ("idle" or
// "generating") for the browser test (tests/server/node/webui_browser.mjs).

import { renderMarkdown } from './markdown.js';

const $ = (id) => document.getElementById(id);
const STORE = 'opal.chat.v1';
const SETTINGS = 'opal.settings.v1';

const DEFAULTS = { system: '', temperature: 0.8, top_p: 0.95, top_k: 40, max_tokens: 512, seed: '', api_key: '', extra: '' };
let settings = { ...DEFAULTS, ...load(SETTINGS, {}) };
let messages = load(STORE, []);  // [{role, content, stats?, error?}]
let controller = null;           // the running request's AbortController

function load(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v ?? fallback;
  } catch {
    return fallback;
  }
}
function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(messages));
    localStorage.setItem(SETTINGS, JSON.stringify(settings));
  } catch {
    // storage full or disabled: the page still works, it just forgets
  }
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (settings.api_key) h.Authorization = `Bearer ${settings.api_key}`;
  return h;
}

// ---- rendering -----------------------------------------------------------------

function messageNode(m) {
  const div = document.createElement('div');
  div.className = `msg ${m.role}`;
  const body = document.createElement('div');
  body.className = 'body';
  div.appendChild(body);
  const meta = document.createElement('div');
  meta.className = 'stats';
  div.appendChild(meta);
  fill(div, m);
  return div;
}

function fill(div, m) {
  const body = div.querySelector('.body');
  if (m.role === 'assistant') body.innerHTML = renderMarkdown(m.content);
  else body.textContent = m.content;
  const meta = div.querySelector('.stats');
  meta.textContent = m.stats || '';
  div.classList.toggle('error', !!m.error);
  if (m.error) {
    const e = document.createElement('div');
    e.className = 'error-text';
    e.textContent = m.error;
    body.appendChild(e);
  }
}

function renderAll() {
  const list = $('messages');
  list.replaceChildren(...messages.map(messageNode));
  $('empty').hidden = messages.length > 0;
  scrollDown(true);
}

function scrollDown(force) {
  const list = $('messages');
  const near = list.scrollHeight - list.scrollTop - list.clientHeight < 120;
  if (force || near) list.scrollTop = list.scrollHeight;
}

function setState(state) {
  document.body.dataset.state = state;
  const busy = state === 'generating';
  $('send').hidden = busy;
  $('stop').hidden = !busy;
  $('input').disabled = false;
}

// ---- the model's name --------------------------------------------------------------

async function loadModel() {
  const el = $('model-name');
  try {
    const r = await fetch('v1/models', { headers: headers() });
    const j = await r.json();
    const id = j?.data?.[0]?.id;
    if (!id) throw new Error(j?.error?.message || `HTTP ${r.status}`);
    el.textContent = id.split('/').pop();
    el.title = id;
    document.title = `${el.textContent} · opal`;
  } catch (e) {
    el.textContent = 'model unavailable';
    el.title = String(e.message || e);
  }
}

// ---- a request -------------------------------------------------------------------

function requestBody() {
  const body = {
    messages: [],
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number(settings.temperature),
    top_p: Number(settings.top_p),
    top_k: Number(settings.top_k),
    max_tokens: Number(settings.max_tokens),
  };
  if (settings.seed !== '' && settings.seed !== null) body.seed = Number(settings.seed);
  if (settings.system.trim()) body.messages.push({ role: 'system', content: settings.system });
  for (const m of messages)
    if (!m.error || m.content) body.messages.push({ role: m.role, content: m.content });
  if (settings.extra.trim()) Object.assign(body, JSON.parse(settings.extra));  // checked by readSettings()
  return body;
}

// Yields the JSON payload of each `data:` event of an SSE body; stops at [DONE].
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of frame.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        yield JSON.parse(data);
      }
    }
  }
}

function statsText(n, seconds, finish, timings) {
  const rate = timings?.predicted_per_second ?? (seconds > 0 ? n / seconds : 0);
  const parts = [`${n} token${n === 1 ? '' : 's'}`, `${rate.toFixed(1)} tokens/s`];
  if (finish === 'length') parts.push('stopped at the token limit');
  else if (finish === 'stopped') parts.push('stopped');
  else if (finish && finish !== 'stop') parts.push(finish);
  return parts.join(' · ');
}

async function send(text) {
  if (controller) return;
  messages.push({ role: 'user', content: text });
  const body = requestBody();
  const reply = { role: 'assistant', content: '' };
  messages.push(reply);
  renderAll();
  const node = $('messages').lastElementChild;
  node.classList.add('streaming');
  controller = new AbortController();
  setState('generating');
  const t0 = performance.now();
  let first = 0;
  let n = 0;
  let finish = null;
  let timings = null;
  let pending = false;
  const paint = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      fill(node, reply);
      scrollDown(false);
    });
  };
  try {
    const r = await fetch('v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(body), signal: controller.signal,
    });
    if (!r.ok) {
      let msg = `HTTP ${r.status}`;
      try {
        msg = (await r.json()).error?.message || msg;
      } catch {}
      throw new Error(msg);
    }
    for await (const ev of events(r)) {
      if (ev.error) throw new Error(ev.error.message || 'the server reported an error');
      if (ev.timings) timings = ev.timings;
      if (ev.usage) n = ev.usage.completion_tokens;
      const choice = ev.choices?.[0];
      if (!choice) continue;
      const piece = choice.delta?.content;
      if (piece) {
        if (!first) first = performance.now();
        reply.content += piece;
        if (!ev.usage) ++n;
        paint();
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  } catch (e) {
    if (e.name === 'AbortError') finish = 'stopped';
    else reply.error = String(e.message || e);
  } finally {
    const seconds = ((first ? performance.now() - first : performance.now() - t0)) / 1000;
    if (!reply.error || n > 0) reply.stats = statsText(n, seconds, finish, finish === 'stopped' ? null : timings);
    controller = null;
    node.classList.remove('streaming');
    fill(node, reply);
    save();
    setState('idle');
    scrollDown(false);
  }
}

function stop() {
  if (controller) controller.abort();
}

function newChat() {
  stop();
  messages = [];
  save();
  renderAll();
  $('input').focus();
}

// ---- settings ---------------------------------------------------------------------

const FIELDS = ['system', 'temperature', 'top_p', 'top_k', 'max_tokens', 'seed', 'api_key', 'extra'];

function showSettingsError(text) {
  const e = $('settings-error');
  e.textContent = text;
  e.hidden = !text;
  if (text) $('settings').open = true;
}

// Takes the form's values; false (and the reason shown) when the extra fields are not a JSON object.
function readSettings() {
  const next = { ...settings };
  for (const f of FIELDS) next[f] = $(`s-${f}`).value;
  if (next.extra.trim()) {
    try {
      const v = JSON.parse(next.extra);
      if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
    } catch (e) {
      showSettingsError(`extra request fields: ${e.message}`);
      return false;
    }
  }
  showSettingsError('');
  settings = next;
  save();
  return true;
}

function writeSettings() {
  for (const f of FIELDS) $(`s-${f}`).value = settings[f];
}

// ---- wiring -----------------------------------------------------------------------

function submit() {
  const input = $('input');
  const text = input.value.trim();
  if (!text || controller || !readSettings()) return;
  input.value = '';
  autosize();
  send(text);
}

function autosize() {
  const input = $('input');
  input.style.height = 'auto';
  input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
}

document.addEventListener('DOMContentLoaded', () => {
  writeSettings();
  for (const f of FIELDS) $(`s-${f}`).addEventListener('change', readSettings);
  $('s-reset').addEventListener('click', () => {
    settings = { ...DEFAULTS, api_key: settings.api_key };
    writeSettings();
    readSettings();
  });
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    submit();
  });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit();
    }
  });
  $('input').addEventListener('input', autosize);
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', newChat);
  $('messages').addEventListener('click', (e) => {  // copy buttons of code blocks
    const b = e.target.closest('button.copy');
    if (!b) return;
    const code = b.parentElement.querySelector('code')?.textContent ?? '';
    navigator.clipboard?.writeText(code).then(() => {
      b.textContent = 'copied';
      setTimeout(() => (b.textContent = 'copy'), 1200);
    }, () => {});
  });
  renderAll();
  setState('idle');
  loadModel();
  $('input').focus();
});
