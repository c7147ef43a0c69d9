// The chat page of `purebee-rs serve`: a conversation with the served model through the
// server's own OpenAI endpoints (GET v1/models, POST v1/chat/completions with streaming).
// Plain JavaScript, no dependency, nothing loaded from elsewhere. URLs are relative, so the
// page also works behind a proxy that serves it under a path prefix.
'use strict';

const $ = (id) => document.getElementById(id);
const els = {
  model: $('model'), newChat: $('new-chat'), settingsToggle: $('settings-toggle'), settings: $('settings'),
  scroller: $('scroller'), empty: $('empty'), messages: $('messages'), error: $('error'),
  keyPanel: $('key-panel'), apiKey: $('api-key'), composer: $('composer'), prompt: $('prompt'),
  send: $('send'), stop: $('stop'),
};
// The settings' inputs by the name they are stored under.
const fields = {
  temperature: $('temperature'), topP: $('top-p'), maxTokens: $('max-tokens'), system: $('system-prompt'),
};
const DEFAULTS = { temperature: '0.8', topP: '0.95', maxTokens: '512', system: '' };
const SETTINGS_KEY = 'purebee.settings';
const API_KEY_KEY = 'purebee.apiKey';

const state = {
  model: null, // data[0].id of v1/models; null until known
  turns: [], // the conversation as sent: {role, content}, the system prompt excluded
  controller: null, // the running answer's AbortController
  pending: null, // an answer waiting for the API key, sent again once it is entered
};

// Storage can be switched off (private modes, policies): the page then works without it.
function stored(area, key) {
  try { return window[area].getItem(key); } catch { return null; }
}
function store(area, key, value) {
  try {
    if (value === null) window[area].removeItem(key); else window[area].setItem(key, value);
  } catch { /* not kept: the page still works for this load */ }
}

// ---- Settings ----------------------------------------------------------------------------

function loadSettings() {
  let saved = {};
  try { saved = JSON.parse(stored('localStorage', SETTINGS_KEY) || '{}') || {}; } catch { /* corrupt: defaults */ }
  for (const [name, input] of Object.entries(fields)) {
    input.value = typeof saved[name] === 'string' ? saved[name] : DEFAULTS[name];
  }
}

function saveSettings() {
  const values = Object.fromEntries(Object.entries(fields).map(([name, input]) => [name, input.value]));
  store('localStorage', SETTINGS_KEY, JSON.stringify(values));
}

class SettingsError extends Error {
  constructor(message, input) { super(message); this.input = input; }
}

// A setting's number, or a SettingsError saying what it must be. Empty is an error too: a
// value the user cleared is not silently replaced by the server's default.
function setting(input, label, rule, valid) {
  const text = input.value.trim();
  if (text === '') throw new SettingsError(`${label} is empty: it must be ${rule} (see Settings).`, input);
  const value = Number(text);
  if (!Number.isFinite(value) || !valid(value)) {
    throw new SettingsError(`${label} "${text}" is invalid: it must be ${rule} (see Settings).`, input);
  }
  return value;
}

function readSettings() {
  return {
    temperature: setting(fields.temperature, 'Temperature', 'a number ≥ 0', (t) => t >= 0),
    top_p: setting(fields.topP, 'Top-p', 'a number above 0 and at most 1', (p) => p > 0 && p <= 1),
    max_tokens: setting(fields.maxTokens, 'Max tokens', 'a whole number ≥ 1', (n) => Number.isInteger(n) && n >= 1),
    system: fields.system.value.trim(),
  };
}

function showSettings(open) {
  els.settings.hidden = !open;
  els.settingsToggle.setAttribute('aria-expanded', String(open));
}

// ---- Errors, busy state ------------------------------------------------------------------

function showError(message) {
  els.error.textContent = message;
  els.error.hidden = !message;
}

function setBusy(busy) {
  document.body.dataset.busy = busy ? '1' : '0';
  els.send.disabled = busy;
  els.stop.hidden = !busy;
  els.messages.setAttribute('aria-busy', String(busy));
}

// The message of a failed response: the server's {"error": {"message"}} when it sent one.
async function errorText(response) {
  const text = await response.text().catch(() => '');
  try {
    const message = JSON.parse(text).error?.message;
    if (message) return `${message} (HTTP ${response.status})`;
  } catch { /* not JSON */ }
  return `The server answered HTTP ${response.status}${text ? `: ${text.slice(0, 300)}` : ''}`;
}

function requestHeaders() {
  const headers = { 'Content-Type': 'application/json' };
  const key = stored('sessionStorage', API_KEY_KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  return headers;
}

// ---- Markdown ----------------------------------------------------------------------------
// A small renderer for answers. The text is HTML-escaped first, so every tag in the output is
// one this code wrote: model text never reaches innerHTML unescaped. Links keep http(s) URLs
// only, so no `javascript:` URL can be made.

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const escapeHtml = (text) => text.replace(/[&<>"']/g, (c) => ESCAPES[c]);

function emphasis(text) {
  return text
    .replace(/\[([^\]]+)\]\((https?:\/\/[^\s)*]+)\)/g, '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>')
    .replace(/\*\*(?=\S)(.+?)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|[^*\w])\*(?=\S)([^*]+?)\*(?![*\w])/g, '$1<em>$2</em>');
}

// Code spans first, so that nothing inside them reads as emphasis or a link.
function inline(text) {
  return text.split(/(`[^`]+`)/).map((part, i) => (i % 2 ? `<code>${part.slice(1, -1)}</code>` : emphasis(part))).join('');
}

function renderMarkdown(source) {
  const lines = escapeHtml(source.replace(/\r\n?/g, '\n')).split('\n');
  const html = [];
  let paragraph = [];
  let list = null; // {tag, start, items}
  const flushParagraph = () => {
    if (paragraph.length) html.push(`<p>${paragraph.map(inline).join('<br>')}</p>`);
    paragraph = [];
  };
  const flushList = () => {
    if (list) {
      const start = list.tag === 'ol' && list.start !== 1 ? ` start="${list.start}"` : '';
      html.push(`<${list.tag}${start}>${list.items.map((item) => `<li>${inline(item)}</li>`).join('')}</${list.tag}>`);
    }
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = /^\s*```\s*([\w.+#-]*)\s*$/.exec(line);
    if (fence) {
      flushParagraph(); flushList();
      const code = [];
      // A fence not closed yet (the answer is still streaming) runs to the end.
      while (++i < lines.length && !/^\s*```\s*$/.test(lines[i])) code.push(lines[i]);
      const lang = fence[1];
      html.push(`<div class="code"><div class="code-bar"><span>${lang || 'code'}</span>` +
        `<button type="button" class="copy">Copy</button></div><pre><code>${code.join('\n')}</code></pre></div>`);
      continue;
    }
    const heading = /^(#{1,6})\s+(.+)$/.exec(line);
    const item = /^\s*([-*+]|(\d{1,9})[.)])\s+(.*)$/.exec(line);
    if (heading) {
      flushParagraph(); flushList();
      html.push(`<h${heading[1].length}>${inline(heading[2])}</h${heading[1].length}>`);
    } else if (item) {
      flushParagraph();
      const tag = item[2] === undefined ? 'ul' : 'ol';
      if (list && list.tag !== tag) flushList();
      if (!list) list = { tag, start: Number(item[2] ?? 1), items: [] };
      list.items.push(item[3]);
    } else if (line.trim() === '') {
      flushParagraph(); flushList();
    } else if (list && /^\s+\S/.test(line)) {
      list.items[list.items.length - 1] += ` ${line.trim()}`; // an indented line continues its item
    } else {
      flushList();
      paragraph.push(line);
    }
  }
  flushParagraph(); flushList();
  return html.join('');
}

// ---- Messages ----------------------------------------------------------------------------

function addMessage(role, text) {
  const message = document.createElement('article');
  message.className = `message ${role}`;
  const body = document.createElement('div');
  body.className = 'body';
  if (role === 'user') body.textContent = text; // the user's text is shown as typed
  message.append(body);
  if (role === 'assistant') {
    const meta = document.createElement('div');
    meta.className = 'meta';
    message.append(meta);
  }
  els.messages.append(message);
  els.empty.hidden = true;
  scrollToEnd(true);
  return message;
}

// Keeps the newest text in view, unless the user scrolled up to read.
function scrollToEnd(force) {
  const s = els.scroller;
  if (force || s.scrollHeight - s.scrollTop - s.clientHeight < 120) s.scrollTop = s.scrollHeight;
}

function showAnswer(message, text) {
  const follow = els.scroller.scrollHeight - els.scroller.scrollTop - els.scroller.clientHeight < 120;
  message.querySelector('.body').innerHTML = renderMarkdown(text);
  // The raw text as streamed, beside its rendering (what the tests compare with the API's).
  message.dataset.raw = text;
  if (follow) scrollToEnd(true);
}

// "42 tokens · 35.1 tokens/s". The rate is the tokens after the first over the time from the
// first to the last: the decoding speed, without the wait for the prompt.
function stats(timing, outcome) {
  const n = timing.usage?.completion_tokens ?? timing.chunks;
  const parts = [`${n} token${n === 1 ? '' : 's'}`];
  const seconds = (timing.last - timing.first) / 1000;
  if (n > 1 && seconds > 0) parts.push(`${((n - 1) / seconds).toFixed(1)} tokens/s`);
  if (timing.first !== null) parts.push(`first token ${((timing.first - timing.start) / 1000).toFixed(2)} s`);
  if (outcome === 'stopped') parts.push('stopped');
  if (timing.finish === 'length') parts.push('cut at max tokens');
  return parts.join(' · ');
}

// ---- Streaming ---------------------------------------------------------------------------

// Reads server-sent events and calls onData with each `data:` line's JSON; returns once
// `data: [DONE]` comes. The server writes one `data:` line per event, so the lines are read
// one by one; a line split across network reads waits in `buffer` for its end.
async function readEvents(response, onData) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error('The answer ended before it was complete (the connection closed).');
    buffer += value;
    const lines = buffer.split('\n');
    buffer = lines.pop();
    for (const line of lines) {
      if (!line.startsWith('data:')) continue; // blank separators, comments
      const data = line.slice(5).trim();
      if (data === '[DONE]') return;
      const event = JSON.parse(data);
      // An error after the stream started comes as one event with the error object.
      if (event.error) throw new Error(event.error.message || 'The server failed during the answer.');
      onData(event);
    }
  }
}

async function send() {
  if (state.controller) return;
  if (state.pending) {
    showError('Enter the API key first: the question above is waiting for it.');
    els.apiKey.focus();
    return;
  }
  const text = els.prompt.value;
  if (!text.trim()) return;
  let settings;
  try {
    settings = readSettings();
  } catch (e) {
    showError(e.message);
    showSettings(true);
    e.input?.focus();
    return;
  }
  showError('');
  els.prompt.value = '';
  fitPrompt();
  state.turns.push({ role: 'user', content: text });
  const question = addMessage('user', text);
  const answer = addMessage('assistant', '');
  // The whole conversation goes with every question: the server keeps no conversation.
  const messages = (settings.system ? [{ role: 'system', content: settings.system }] : []).concat(state.turns);
  const body = {
    messages, stream: true, stream_options: { include_usage: true },
    temperature: settings.temperature, top_p: settings.top_p, max_tokens: settings.max_tokens,
  };
  if (state.model) body.model = state.model;
  await run({ body, question, answer, text });
}

async function run(job) {
  job.answer.querySelector('.meta').textContent = '';
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  const timing = { start: performance.now(), first: null, last: null, chunks: 0, usage: null, finish: null };
  let text = '';
  let outcome = 'done';
  let frame = 0;
  try {
    const sentKey = Boolean(stored('sessionStorage', API_KEY_KEY));
    const response = await fetch('v1/chat/completions', {
      method: 'POST', headers: requestHeaders(), body: JSON.stringify(job.body), signal: controller.signal,
    });
    if (response.status === 401) {
      // Ask for the key in the page; the answer is sent again once it is entered. A key
      // that was sent and refused is forgotten and the server's reason shown.
      outcome = 'key';
      if (sentKey) {
        store('sessionStorage', API_KEY_KEY, null);
        showError(await errorText(response));
      }
      state.pending = job;
      job.answer.querySelector('.meta').textContent = 'Waiting for the API key…';
      els.keyPanel.hidden = false;
      els.apiKey.focus();
      return;
    }
    if (!response.ok) throw new Error(await errorText(response));
    await readEvents(response, (event) => {
      if (event.usage) timing.usage = event.usage;
      const choice = event.choices?.[0];
      if (choice?.finish_reason) timing.finish = choice.finish_reason;
      const delta = choice?.delta?.content;
      if (!delta) return;
      text += delta;
      timing.chunks += 1;
      timing.last = performance.now();
      timing.first ??= timing.last;
      // One rendering per frame, however fast the chunks come.
      frame ||= requestAnimationFrame(() => { frame = 0; showAnswer(job.answer, text); });
    });
  } catch (e) {
    if (e.name === 'AbortError') {
      outcome = 'stopped';
    } else {
      outcome = 'failed';
      showError(e instanceof TypeError ? `The server cannot be reached: ${e.message}` : e.message);
    }
  } finally {
    cancelAnimationFrame(frame);
    state.controller = null;
    if (outcome !== 'key') finish(job, text, timing, outcome);
    setBusy(false);
  }
}

// Ends an answer. One with text joins the conversation (a stopped one as far as it went);
// one without takes its question back: removed, and returned to the input box to send again.
function finish(job, text, timing, outcome) {
  if (!job.answer.isConnected) return; // a new chat cleared it
  if (text) {
    showAnswer(job.answer, text);
    job.answer.querySelector('.meta').textContent = stats(timing, outcome);
    state.turns.push({ role: 'assistant', content: text });
    return;
  }
  if (outcome === 'done') {
    job.answer.querySelector('.meta').textContent = 'The model gave no text.';
    state.turns.push({ role: 'assistant', content: '' });
    return;
  }
  state.turns.pop();
  job.question.remove();
  job.answer.remove();
  els.empty.hidden = els.messages.childElementCount > 0;
  if (!els.prompt.value) { els.prompt.value = job.text; fitPrompt(); }
}

function newChat() {
  state.controller?.abort();
  state.turns = [];
  state.pending = null;
  els.keyPanel.hidden = true;
  els.messages.replaceChildren();
  els.empty.hidden = false;
  showError('');
  els.prompt.focus();
}

// ---- Model name --------------------------------------------------------------------------

async function loadModel() {
  for (let attempt = 0; attempt < 60; attempt++) {
    try {
      const response = await fetch('v1/models', { headers: requestHeaders() });
      if (response.ok) {
        state.model = (await response.json()).data?.[0]?.id ?? null;
        els.model.textContent = state.model ?? 'no model';
        els.model.title = state.model ?? '';
        if (state.model) document.title = `${state.model} · purebee-rs chat`;
        return;
      }
      if (response.status === 401) { els.model.textContent = 'model hidden (API key)'; return; }
    } catch { /* the server is not reachable yet */ }
    // 503 while the model loads: ask again, less and less often.
    els.model.textContent = 'loading…';
    await new Promise((resolve) => setTimeout(resolve, Math.min(500 * 2 ** attempt, 5000)));
  }
  els.model.textContent = 'unavailable';
}

// ---- Wiring ------------------------------------------------------------------------------

// The input grows with its text up to a limit, then scrolls.
function fitPrompt() {
  els.prompt.style.height = 'auto';
  els.prompt.style.height = `${Math.min(els.prompt.scrollHeight, 240)}px`;
}

async function copyText(text) {
  // The Clipboard API needs a secure context (https or localhost); elsewhere, the old way.
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  const area = document.createElement('textarea');
  area.value = text;
  document.body.append(area);
  area.select();
  document.execCommand('copy');
  area.remove();
}

els.composer.addEventListener('submit', (e) => { e.preventDefault(); send(); });
els.prompt.addEventListener('keydown', (e) => {
  // Enter sends, Shift+Enter is a newline; Enter that confirms an IME composition does neither.
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
});
els.prompt.addEventListener('input', fitPrompt);
els.stop.addEventListener('click', () => state.controller?.abort());
els.newChat.addEventListener('click', newChat);
els.settingsToggle.addEventListener('click', () => showSettings(els.settings.hidden));
els.settings.addEventListener('input', saveSettings);
els.keyPanel.addEventListener('submit', (e) => {
  e.preventDefault();
  const key = els.apiKey.value.trim();
  if (!key) { showError('Enter the API key, or start a new chat.'); return; }
  store('sessionStorage', API_KEY_KEY, key);
  els.apiKey.value = '';
  els.keyPanel.hidden = true;
  showError('');
  if (!state.model) loadModel();
  const job = state.pending;
  state.pending = null;
  if (job) run(job);
});
els.messages.addEventListener('click', (e) => {
  const button = e.target.closest('button.copy');
  if (!button) return;
  copyText(button.closest('.code').querySelector('code').textContent).then(
    () => { button.textContent = 'Copied'; },
    () => { button.textContent = 'Copy failed'; },
  ).finally(() => setTimeout(() => { button.textContent = 'Copy'; }, 1500));
});

loadSettings();
setBusy(false);
loadModel();
