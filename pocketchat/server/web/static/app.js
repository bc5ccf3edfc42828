// app.js — the pocketchat web chat page (served at "/").
// Owns: talking to /web/api/* (chats, answers as a server-sent event stream),
// the chat list / drawer, the message view, the composer (files, paste,
// drag-and-drop), the per-chat settings panel, and the model status line
// (/web/api/info + polling /health). Markdown rendering lives in markdown.js.
// Safety rule: text from the model, file names and saved chats only ever
// reach the page through textContent or markdown.js (which builds nodes).

import { renderMarkdown } from './markdown.js';

const MAX_FILE_BYTES = 3 * 1024 * 1024;
const HEALTH_EVERY_MS = 2000;
const NUM = new Intl.NumberFormat('en-US');

const $ = (sel) => document.querySelector(sel);

const ui = {
  menu: $('#menu'),
  sidebar: $('#sidebar'),
  backdrop: $('#backdrop'),
  chatList: $('#chat-list'),
  newChat: $('#new-chat'),
  modelInfo: $('#model-info'),
  status: $('#status'),
  meter: $('#context-meter'),
  settingsButton: $('#settings'),
  settingsPanel: $('#chat-settings'),
  systemPrompt: $('#system-prompt'),
  thinkingBudget: $('#thinking-budget'),
  saveSettings: $('#save-settings'),
  settingsNote: $('#settings-note'),
  scroller: $('#scroller'),
  messages: $('#messages'),
  empty: $('#empty'),
  progressWrap: $('#progress-wrap'),
  progress: $('#progress'),
  progressText: $('#progress-text'),
  busyNote: $('#busy-note'),
  chips: $('#chips'),
  attach: $('#attach'),
  fileInput: $('#file-input'),
  composer: $('#composer'),
  toolChoice: $('#tool-choice'),
  send: $('#send'),
  stop: $('#stop'),
  composerNote: $('#composer-note'),
  dropOverlay: $('#drop-overlay'),
};

const state = {
  info: null,
  chats: [],
  chat: null,            // the open chat object (as the server sent it, kept in step locally)
  pendingSettings: null, // settings saved before the chat exists
  files: [],             // [{name, size, data: Promise<string>}]
  editing: false,        // the next send replaces the last user message
  answering: false,
  controller: null,      // AbortController of the running answer
  answerId: null,
  contextLimit: 0,
};

// ---------------------------------------------------------------- helpers

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function button(cls, text, title) {
  const b = el('button', cls, text);
  b.type = 'button';
  if (title) b.title = title;
  return b;
}

function show(node, visible) {
  node.hidden = !visible;
}

function formatBytes(n) {
  if (n < 1024) return n + ' B';
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
  return (n / 1024 / 1024).toFixed(1) + ' MiB';
}

function errorMessage(body, fallback) {
  if (body && body.error) {
    if (typeof body.error === 'string') return body.error;
    if (body.error.message) return String(body.error.message);
  }
  if (body && body.message) return String(body.message);
  return fallback;
}

class ApiError extends Error {}

function toSignin() {
  location.href = '/signin';
}

/** fetch JSON from the server; throws ApiError with the server's message. */
async function api(path, { method = 'GET', body } = {}) {
  const opts = { method, headers: { Accept: 'application/json' } };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, opts);
  } catch (e) {
    throw new ApiError('The server cannot be reached.');
  }
  if (res.status === 401) {
    toSignin();
    throw new ApiError('Sign-in needed.');
  }
  if (res.status === 204) return null;
  let data = null;
  try {
    data = await res.json();
  } catch (e) {
    data = null;
  }
  if (!res.ok) throw new ApiError(errorMessage(data, `The server answered ${res.status}.`));
  return data;
}

function chatUrl(id) {
  return '/web/api/chats/' + encodeURIComponent(id);
}

function setAnswering(on) {
  state.answering = on;
  document.body.dataset.state = on ? 'answering' : 'idle';
  show(ui.stop, on);
  show(ui.send, !on);
  document.querySelectorAll('.regenerate, .edit').forEach((b) => { b.disabled = on; });
}

function nearBottom() {
  const s = ui.scroller;
  return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
}

function scrollToBottom() {
  ui.scroller.scrollTop = ui.scroller.scrollHeight;
}

function composerNote(text) {
  ui.composerNote.replaceChildren();
  if (text) ui.composerNote.textContent = text;
}

// ---------------------------------------------------------------- model status

function renderInfo(info) {
  ui.modelInfo.replaceChildren();
  if (!info) return;
  ui.modelInfo.appendChild(el('span', 'model-name', info.model || 'no model'));
  const details = [info.backend, info.placement].filter(Boolean).join(' · ');
  if (details) ui.modelInfo.appendChild(el('span', 'model-details', details));
  ui.modelInfo.title = [info.model, details].filter(Boolean).join(' — ');
  if (info.context_limit) state.contextLimit = info.context_limit;
  setStatus(info.state, info.note);
  renderTools(info.tools || []);
}

/** The tool servers' tools: the next answer may be made to call one. */
function renderTools(tools) {
  const chosen = ui.toolChoice.value;
  ui.toolChoice.replaceChildren(el('option', '', 'tools: the model chooses'));
  ui.toolChoice.firstChild.value = '';
  for (const tool of tools) {
    const option = el('option', '', `use ${tool.name}`);
    option.value = tool.name;
    option.title = [tool.server, tool.description].filter(Boolean).join(': ');
    ui.toolChoice.appendChild(option);
  }
  ui.toolChoice.value = tools.some((t) => t.name === chosen) ? chosen : '';
  show(ui.toolChoice, tools.length > 0);
}

const STATE_TEXT = {
  loading: 'loading the model…',
  not_responding: 'the model process does not respond',
  error: 'the model could not be loaded',
};

function setStatus(st, note) {
  if (!st || st === 'ready' || st === 'ok' || (st === 'idle' && !note)) {
    ui.status.textContent = note && st !== 'ready' && st !== 'ok' ? note : '';
    show(ui.status, false);
    ui.status.className = 'status';
    return;
  }
  ui.status.textContent = note || STATE_TEXT[st] || st;
  ui.status.className = 'status status-' + String(st).replace(/[^\w-]/g, '');
  show(ui.status, true);
}

async function loadInfo() {
  try {
    state.info = await api('/web/api/info');
    renderInfo(state.info);
  } catch (e) {
    setStatus('error', e.message);
  }
}

let lastHealth = null;

async function pollHealth() {
  let data = null;
  let ok = false;
  try {
    const res = await fetch('/health', { headers: { Accept: 'application/json' } });
    ok = res.ok;
    try { data = await res.json(); } catch (e) { data = null; }
  } catch (e) {
    setStatus('error', 'The server cannot be reached.');
    lastHealth = 'unreachable';
    return;
  }
  const st = String((data && data.status) || (ok ? 'ok' : 'error'));
  const ready = ok && /^(ok|ready|healthy|idle)$/i.test(st);
  let note = '';
  if (data) {
    if (typeof data.message === 'string') note = data.message;
    else if (typeof data.error === 'string') note = data.error;
    else if (data.error && data.error.message) note = String(data.error.message);
  }
  if (ready) setStatus('ready');
  else setStatus(/load/i.test(st) ? 'loading' : st, note);
  const key = st + '|' + ok;
  if (lastHealth !== null && key !== lastHealth && ready) loadInfo();
  lastHealth = key;
}

function startHealthPolling() {
  const tick = async () => {
    if (!document.hidden) await pollHealth();
    setTimeout(tick, HEALTH_EVERY_MS);
  };
  setTimeout(tick, HEALTH_EVERY_MS);
}

// ---------------------------------------------------------------- context meter

function setMeter(used, limit) {
  if (limit) state.contextLimit = limit;
  if (used === undefined || used === null) {
    ui.meter.textContent = '';
    return;
  }
  const lim = state.contextLimit;
  ui.meter.textContent = lim ? `${NUM.format(used)} / ${NUM.format(lim)} tokens`
    : `${NUM.format(used)} tokens`;
  ui.meter.classList.toggle('full', Boolean(lim) && used / lim > 0.9);
}

function meterFromChat(chat) {
  const msgs = (chat && chat.messages) || [];
  for (let i = msgs.length - 1; i >= 0; i--) {
    const s = msgs[i].stats;
    if (s && s.context_used !== undefined) {
      setMeter(s.context_used, s.context_limit);
      return;
    }
  }
  setMeter(null);
}

// ---------------------------------------------------------------- chat list / drawer

function openDrawer(open) {
  document.body.classList.toggle('drawer-open', open);
  ui.menu.setAttribute('aria-expanded', String(open));
  show(ui.backdrop, open);
}

async function refreshChats() {
  try {
    const data = await api('/web/api/chats');
    state.chats = (data && data.chats) || [];
  } catch (e) {
    composerNote(e.message);
    return;
  }
  renderChatList();
}

function chatDate(epoch) {
  if (!epoch) return '';
  const d = new Date(epoch * 1000);
  const now = new Date();
  if (d.toDateString() === now.toDateString()) {
    return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  }
  return d.toLocaleDateString([], { month: 'short', day: 'numeric' });
}

function chatItem(c) {
  const item = el('div', 'chat-item');
  item.dataset.id = c.id;
  if (state.chat && state.chat.id === c.id) item.classList.add('active');
  const open = button('chat-open');
  open.appendChild(el('span', 'chat-title', c.title || 'New chat'));
  const meta = [chatDate(c.updated), c.messages ? `${c.messages} msg` : ''].filter(Boolean).join(' · ');
  open.appendChild(el('span', 'chat-meta', meta));
  open.addEventListener('click', () => {
    openDrawer(false);
    if (!state.chat || state.chat.id !== c.id) openChat(c.id);
  });
  const rename = button('rename', '✎', 'Rename');
  rename.setAttribute('aria-label', 'Rename chat');
  rename.addEventListener('click', (e) => { e.stopPropagation(); renameChat(c); });
  const del = button('delete', '✕', 'Delete');
  del.setAttribute('aria-label', 'Delete chat');
  del.addEventListener('click', (e) => { e.stopPropagation(); deleteChat(c); });
  item.append(open, rename, del);
  return item;
}

function renderChatList() {
  ui.chatList.replaceChildren();
  if (!state.chats.length) {
    ui.chatList.appendChild(el('div', 'note list-empty', 'No saved chats yet.'));
    return;
  }
  state.chats.forEach((c) => ui.chatList.appendChild(chatItem(c)));
}

function markActive() {
  const id = state.chat && state.chat.id;
  ui.chatList.querySelectorAll('.chat-item').forEach((item) => {
    item.classList.toggle('active', item.dataset.id === id);
  });
}

async function renameChat(c) {
  const title = prompt('New title for this chat:', c.title || '');
  if (title === null || !title.trim()) return;
  try {
    const chat = await api(chatUrl(c.id), { method: 'PATCH', body: { title: title.trim() } });
    if (state.chat && state.chat.id === c.id && chat) state.chat.title = chat.title;
  } catch (e) {
    composerNote(e.message);
  }
  refreshChats();
}

async function deleteChat(c) {
  if (!confirm(`Delete the chat “${c.title || 'New chat'}”?`)) return;
  try {
    await api(chatUrl(c.id), { method: 'DELETE' });
  } catch (e) {
    composerNote(e.message);
    return;
  }
  if (state.chat && state.chat.id === c.id) newChat();
  refreshChats();
}

// ---------------------------------------------------------------- open / new chat

function setHash(id) {
  const want = id ? '#chat=' + encodeURIComponent(id) : '';
  if (location.hash !== want) {
    history.replaceState(null, '', want || location.pathname + location.search);
  }
}

function hashChatId() {
  const m = /^#chat=(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

function newChat() {
  if (state.answering) stopAnswer();
  state.chat = null;
  state.editing = false;
  setHash(null);
  ui.messages.replaceChildren();
  updateEmpty();
  setMeter(null);
  fillSettings();
  markActive();
  composerNote('');
  openDrawer(false);
  ui.composer.focus();
}

async function openChat(id) {
  if (state.answering) stopAnswer();
  let chat;
  try {
    chat = await api(chatUrl(id));
  } catch (e) {
    composerNote(e.message);
    if (state.chat && state.chat.id === id) return;
    setHash(state.chat ? state.chat.id : null);
    return;
  }
  state.chat = chat;
  state.editing = false;
  state.pendingSettings = null;
  setHash(chat.id);
  renderChat(chat);
  fillSettings();
  markActive();
  composerNote('');
}

function renderChat(chat) {
  ui.messages.replaceChildren();
  (chat.messages || []).forEach((m) => {
    if (m.role === 'user') ui.messages.appendChild(userMessage(m));
    else if (m.role === 'assistant') ui.messages.appendChild(savedAssistant(m));
    else if (m.role === 'tool') placeSavedResult(m);
  });
  updateActions();
  updateEmpty();
  meterFromChat(chat);
  scrollToBottom();
}

function updateEmpty() {
  show(ui.empty, !ui.messages.children.length);
}

// ---------------------------------------------------------------- messages

function userMessage(m) {
  const node = el('div', 'message user');
  const atts = m.attachments || [];
  if (atts.length) {
    const row = el('div', 'attachments');
    atts.forEach((a) => {
      const chip = el('span', 'attachment', a.name);
      const bits = [a.kind, a.pages ? `${a.pages} pages` : '', a.size ? formatBytes(a.size) : '']
        .filter(Boolean).join(' · ');
      if (bits) chip.title = bits;
      row.appendChild(chip);
    });
    node.appendChild(row);
  }
  node.appendChild(el('div', 'content', m.content || ''));
  node.appendChild(el('div', 'actions'));
  return node;
}

/** An assistant message view; returns the node and small update helpers. */
function assistantView() {
  const node = el('div', 'message assistant');
  const content = el('div', 'content');
  const tools = el('div', 'tools');
  const figures = el('div', 'figures');
  const actions = el('div', 'actions');
  node.append(content, tools, figures, actions);
  show(figures, false);
  const view = { node, content, tools, figures, thought: null, thoughtLabel: null, thoughtBody: null, answerNow: null };
  return view;
}

function ensureThought(view) {
  if (view.thought) return view.thought;
  const details = el('details', 'thought');
  const summary = el('summary');
  const label = el('span', 'thought-label', 'Thinking…');
  const now = button('answer-now', 'Answer now', 'End the thought and answer now');
  show(now, false);
  now.addEventListener('click', (e) => {
    e.preventDefault();
    e.stopPropagation();
    endThinking(now);
  });
  summary.append(label, now);
  const body = el('div', 'thought-body');
  details.append(summary, body);
  view.node.insertBefore(details, view.content);
  Object.assign(view, { thought: details, thoughtLabel: label, thoughtBody: body, answerNow: now });
  return details;
}

function thoughtLabel(streaming, tokens) {
  const word = streaming ? 'Thinking' : 'Thought';
  return tokens ? `${word} · ${NUM.format(tokens)} tokens` : (streaming ? 'Thinking…' : 'Thought');
}

function savedAssistant(m) {
  const view = assistantView();
  const stats = m.stats || {};
  if (m.thinking) {
    ensureThought(view);
    view.thoughtBody.textContent = m.thinking;
    view.thoughtLabel.textContent = thoughtLabel(false, stats.thinking_tokens);
  }
  view.content.appendChild(renderMarkdown(m.content || ''));
  (Array.isArray(m.tool_calls) ? m.tool_calls : []).forEach((c) => {
    if (c) view.tools.appendChild(toolCallBlock(c.id, c.name, c.arguments).node);
  });
  setFigures(view, m.stats, m.interrupted);
  return view.node;
}

// ---------------------------------------------------------------- tool calls

const DECISION_TEXT = {
  once: 'allowed once',
  always: 'allowed always in this chat',
  never: 'never in this chat',
  deny: 'denied',
};

/** The arguments of a call as readable text: pretty JSON, or the raw text. */
function prettyArguments(args) {
  if (args === undefined || args === null || args === '') return '{}';
  if (typeof args !== 'string') {
    try { return JSON.stringify(args, null, 2); } catch (e) { return String(args); }
  }
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch (e) {
    return args;
  }
}

/** A folded <details class="tool-call"> for one call; returns the node and its parts. */
function toolCallBlock(callId, name, args) {
  const node = el('details', 'tool-call');
  node.dataset.callId = callId === undefined || callId === null ? '' : String(callId);
  const summary = el('summary');
  const label = el('span', 'tool-label', 'Tool: ' + (name || '?'));
  summary.appendChild(label);
  node.append(summary, el('pre', 'tool-args', prettyArguments(args)));
  return { node, label, name: name || '?', buttons: null, error: null, waiting: false, choosing: null };
}

function setWaiting(call, waiting) {
  call.waiting = waiting;
  call.label.textContent = 'Tool: ' + call.name + (waiting ? ' · waiting for you' : '');
  call.node.classList.toggle('waiting', waiting);
}

/** Replace the buttons (or nothing yet) of a call by its decision line. */
function setDecision(call, text) {
  const line = el('div', 'tool-decision', text);
  if (call.buttons) {
    call.buttons.replaceWith(line);
    call.buttons = null;
  } else {
    const args = call.node.querySelector(':scope > .tool-args');
    if (args) args.after(line);
    else call.node.appendChild(line);
  }
  if (call.error) {
    call.error.remove();
    call.error = null;
  }
  setWaiting(call, false);
}

function askButtons(run, call, callId) {
  const row = el('div', 'tool-buttons');
  const choices = [
    ['once', 'tool-once', 'Allow once'],
    ['always', 'tool-always', 'Always in this chat'],
    ['never', 'tool-never', 'Never in this chat'],
    ['deny', 'tool-deny', 'Deny'],
  ];
  choices.forEach(([choice, cls, text]) => {
    const b = button(cls, text);
    b.addEventListener('click', () => decideTool(run, call, callId, choice));
    row.appendChild(b);
  });
  return row;
}

async function decideTool(run, call, callId, choice) {
  if (!call.buttons) return;
  const row = call.buttons;
  row.querySelectorAll('button').forEach((b) => { b.disabled = true; });
  call.choosing = choice;
  if (call.error) {
    call.error.remove();
    call.error = null;
  }
  try {
    await api(chatUrl(run.chatId) + '/tools/' + encodeURIComponent(callId),
      { method: 'POST', body: { choice } });
  } catch (e) {
    if (call.buttons !== row) return; // settled meanwhile (its result came, or the answer ended)
    call.choosing = null;
    row.querySelectorAll('button').forEach((b) => { b.disabled = false; });
    const line = el('div', 'error', (e && e.message) || 'The answer could not be sent.');
    line.setAttribute('role', 'alert');
    row.after(line);
    call.error = line;
    return;
  }
  if (call.buttons === row) setDecision(call, DECISION_TEXT[choice]);
}

/** A <details class="tool-result"> for one result. */
function toolResultBlock(ok, text, note) {
  const node = el('details', ok ? 'tool-result' : 'tool-result failed');
  const summary = el('summary');
  summary.appendChild(el('span', 'tool-result-label', ok ? 'Result' : 'Failed'));
  if (note) summary.appendChild(el('span', 'note', String(note)));
  node.append(summary, el('pre', 'tool-output', text === undefined || text === null ? '' : String(text)));
  return node;
}

/** A saved tool message: its result under the call block with its id, else in the last assistant message. */
function placeSavedResult(m) {
  const id = m.tool_call_id === undefined || m.tool_call_id === null ? null : String(m.tool_call_id);
  const result = toolResultBlock(m.ok !== false, m.content || '', m.interrupted ? 'interrupted' : '');
  const blocks = ui.messages.querySelectorAll('details.tool-call');
  for (let i = blocks.length - 1; i >= 0; i--) {
    if (id !== null && blocks[i].dataset.callId === id) {
      blocks[i].appendChild(result);
      return;
    }
  }
  const assistants = ui.messages.querySelectorAll('.message.assistant');
  const last = assistants[assistants.length - 1];
  if (last) last.querySelector('.tools').appendChild(result);
}

function onToolCall(run, ev) {
  const view = run.view;
  const stick = nearBottom();
  const callId = ev.call_id === undefined || ev.call_id === null ? '' : String(ev.call_id);
  const call = toolCallBlock(callId, ev.name, ev.arguments);
  view.tools.appendChild(call.node);
  run.calls.set(callId, call);
  run.toolCalls.push({ id: callId, name: ev.name || '', arguments: ev.arguments || '' });
  if (ev.ask) {
    call.node.open = true;
    call.buttons = askButtons(run, call, callId);
    call.node.appendChild(call.buttons);
    setWaiting(call, true);
  } else {
    setDecision(call, 'runs without asking (marked safe)');
  }
  if (stick || ev.ask) scrollToBottom();
}

function onToolResult(run, ev) {
  const callId = ev.call_id === undefined || ev.call_id === null ? '' : String(ev.call_id);
  const call = run.calls.get(callId);
  const stick = nearBottom();
  const result = toolResultBlock(ev.ok !== false, ev.text, ev.note);
  if (call) {
    // The result can come before the answer to the POST; otherwise it was answered elsewhere
    // or timed out, and the buttons no longer mean anything.
    if (call.buttons) {
      setDecision(call, call.choosing ? DECISION_TEXT[call.choosing]
        : (ev.ok === false ? 'not run' : 'answered'));
    }
    call.node.appendChild(result);
  } else {
    run.view.tools.appendChild(result);
  }
  run.toolMsgs.push({
    role: 'tool', content: ev.text || '', tool_call_id: callId, name: call ? call.name : '',
    interrupted: false, attachments: [],
  });
  if (stick) scrollToBottom();
}

/** Settle calls still waiting when the answer ends (the server denies them). */
function settlePending(run) {
  run.calls.forEach((call) => {
    if (call.buttons) setDecision(call, run.interrupted ? 'not answered (stopped)' : 'not answered');
  });
}

/** The assistant message before the tools ended; the model answers again in a new one. */
function onStep(run, ev) {
  const view = run.view;
  stopRendering(run);
  view.content.replaceChildren(renderMarkdown(run.content));
  const stats = ev.stats || {};
  if (view.thought) {
    view.thoughtLabel.textContent = thoughtLabel(false, stats.thinking_tokens
      || (run.live && run.live.thinking_tokens));
    show(view.answerNow, false);
  }
  setFigures(view, stats, false);
  if (stats.context_used !== undefined) setMeter(stats.context_used, stats.context_limit);
  run.segments.push({
    role: 'assistant', content: run.content, thinking: run.reasoning, stats,
    interrupted: false, attachments: [], tool_calls: run.toolCalls,
  });
  run.segments.push(...run.toolMsgs);
  run.content = '';
  run.reasoning = '';
  run.live = null;
  run.toolCalls = [];
  run.toolMsgs = [];
  const next = assistantView();
  ui.messages.appendChild(next.node);
  run.view = next;
  updateActions();
  if (nearBottom()) scrollToBottom();
}

function figuresText(stats, interrupted) {
  const s = stats || {};
  const parts = [];
  if (typeof s.decode_tok_s === 'number') parts.push(`${s.decode_tok_s.toFixed(1)} tok/s`);
  if (typeof s.ttft_seconds === 'number') parts.push(`first token ${s.ttft_seconds.toFixed(2)} s`);
  if (typeof s.generated_tokens === 'number') parts.push(`${NUM.format(s.generated_tokens)} tokens`);
  if (s.reused_tokens) {
    const total = s.prompt_length || s.prompt_tokens;
    parts.push(total ? `${NUM.format(s.reused_tokens)} of ${NUM.format(total)} reused`
      : `${NUM.format(s.reused_tokens)} reused`);
  }
  if (interrupted) parts.push('interrupted');
  else if (s.finish_reason === 'length') parts.push('stopped at the length limit');
  return parts.join(' · ');
}

function setFigures(view, stats, interrupted) {
  const f = view.figures;
  f.replaceChildren();
  const line = figuresText(stats, interrupted);
  if (line) f.appendChild(el('div', 'figures-line', line));
  if (stats && stats.retrieval) f.appendChild(el('div', 'retrieval', String(stats.retrieval)));
  if (stats && Array.isArray(stats.sources) && stats.sources.length) {
    f.appendChild(el('div', 'sources', 'Sources: ' + stats.sources.map(String).join(', ')));
  }
  show(f, f.children.length > 0);
}

/** Put .regenerate on the last assistant message and .edit on the last user message. */
function updateActions() {
  ui.messages.querySelectorAll('.regenerate, .edit').forEach((b) => b.remove());
  const users = ui.messages.querySelectorAll('.message.user');
  const assistants = ui.messages.querySelectorAll('.message.assistant');
  const lastUser = users[users.length - 1];
  const lastAssistant = assistants[assistants.length - 1];
  if (lastAssistant) {
    const b = button('regenerate', '↻ Regenerate', 'Answer the last message again');
    b.disabled = state.answering;
    b.addEventListener('click', () => answer('regenerate'));
    lastAssistant.querySelector('.actions').appendChild(b);
  }
  if (lastUser) {
    const b = button('edit', '✎ Edit', 'Edit the last message and answer it again');
    b.disabled = state.answering;
    b.addEventListener('click', () => startEdit(lastUser));
    lastUser.querySelector('.actions').appendChild(b);
  }
}

function startEdit(node) {
  if (state.answering) return;
  ui.composer.value = node.querySelector('.content').textContent;
  state.editing = true;
  autosize();
  ui.composerNote.replaceChildren();
  ui.composerNote.appendChild(document.createTextNode('Editing the last message; Send replaces it and answers again. '));
  const cancel = button('link cancel-edit', 'Cancel edit');
  cancel.addEventListener('click', () => {
    state.editing = false;
    ui.composer.value = '';
    autosize();
    composerNote('');
  });
  ui.composerNote.appendChild(cancel);
  ui.composer.focus();
}

function showError(message) {
  const line = el('div', 'error', message);
  line.setAttribute('role', 'alert');
  ui.messages.appendChild(line);
  updateEmpty();
  scrollToBottom();
}

function clearErrors() {
  ui.messages.querySelectorAll(':scope > .error').forEach((n) => n.remove());
}

// ---------------------------------------------------------------- files

function base64FromBuffer(buf) {
  const bytes = new Uint8Array(buf);
  let binary = '';
  const step = 0x8000;
  for (let i = 0; i < bytes.length; i += step) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + step));
  }
  return btoa(binary);
}

function readFile(file) {
  if (file.arrayBuffer) return file.arrayBuffer().then(base64FromBuffer);
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(base64FromBuffer(r.result));
    r.onerror = () => reject(r.error);
    r.readAsArrayBuffer(file);
  });
}

function addFiles(list) {
  const files = Array.from(list || []);
  const tooBig = [];
  files.forEach((file) => {
    if (file.size > MAX_FILE_BYTES) {
      tooBig.push(`${file.name || 'file'} (${formatBytes(file.size)})`);
      return;
    }
    const data = readFile(file);
    data.catch(() => {});
    state.files.push({ name: file.name || 'pasted-file', size: file.size, data });
  });
  if (tooBig.length) {
    composerNote(`Too big to attach (3 MiB at most): ${tooBig.join(', ')}.`);
  } else if (files.length) {
    composerNote('');
  }
  renderChips();
}

function renderChips() {
  ui.chips.replaceChildren();
  state.files.forEach((f, i) => {
    const chip = el('span', 'chip');
    chip.appendChild(el('span', 'chip-name', f.name));
    chip.appendChild(el('span', 'chip-size', formatBytes(f.size)));
    const remove = button('chip-remove', '×', 'Remove ' + f.name);
    remove.setAttribute('aria-label', 'Remove ' + f.name);
    remove.addEventListener('click', () => {
      state.files.splice(i, 1);
      renderChips();
    });
    chip.appendChild(remove);
    ui.chips.appendChild(chip);
  });
  show(ui.chips, state.files.length > 0);
}

// ---------------------------------------------------------------- answering

/** Read a text/event-stream body and call onEvent for each `data:` JSON. */
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  const handle = (block) => {
    const data = block.split(/\r?\n/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''))
      .join('\n');
    if (!data || data === '[DONE]') return;
    let ev;
    try { ev = JSON.parse(data); } catch (e) { return; }
    onEvent(ev);
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let m;
    while ((m = /\r?\n\r?\n/.exec(buf)) !== null) {
      const block = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      handle(block);
    }
  }
  buf += decoder.decode();
  if (buf.trim()) handle(buf);
}

function showProgress(ev) {
  const total = ev.total || 0;
  const done = Math.min(ev.done || 0, total || ev.done || 0);
  ui.progress.max = total || 1;
  ui.progress.value = total ? done : 0;
  let text = total ? `reading ${NUM.format(done)} / ${NUM.format(total)} tokens`
    : `reading ${NUM.format(done)} tokens`;
  if (typeof ev.seconds_left === 'number' && ev.seconds_left > 0.5) {
    text += ` · about ${Math.ceil(ev.seconds_left)} s left`;
  }
  ui.progressText.textContent = text;
  show(ui.progressWrap, true);
}

function hideProgress() {
  show(ui.progressWrap, false);
}

function setBusyNote(text) {
  ui.busyNote.textContent = text || '';
  show(ui.busyNote, Boolean(text));
}

async function ensureChat() {
  if (state.chat) return state.chat;
  const created = await createChat();
  refreshChats(); // show the new chat in the list (marked active) right away
  return created;
}

async function createChat() {
  const body = state.pendingSettings || {};
  const chat = await api('/web/api/chats', { method: 'POST', body });
  state.pendingSettings = null;
  state.chat = chat;
  if (!state.chat.messages) state.chat.messages = [];
  setHash(chat.id);
  return chat;
}

async function collectFiles() {
  const out = [];
  for (const f of state.files) {
    out.push({ name: f.name, data: await f.data });
  }
  return out;
}

/** Remove the nodes that a regenerate / edit replaces. */
function dropForMode(mode) {
  clearErrors();
  const nodes = Array.from(ui.messages.querySelectorAll('.message'));
  const msgs = (state.chat && state.chat.messages) || [];
  if (mode === 'regenerate') {
    // The whole last answer goes: every assistant message (and its tools) after the last user one.
    let i = nodes.length - 1;
    while (i >= 0 && nodes[i].classList.contains('assistant')) nodes[i--].remove();
    while (msgs.length && msgs[msgs.length - 1].role !== 'user') msgs.pop();
  } else if (mode === 'edit') {
    let i = nodes.length - 1;
    while (i >= 0 && !nodes[i].classList.contains('user')) i--;
    if (i >= 0) nodes.slice(i).forEach((n) => n.remove());
    let j = msgs.length - 1;
    while (j >= 0 && msgs[j].role !== 'user') j--;
    if (j >= 0) msgs.splice(j);
  }
}

async function send() {
  if (state.answering) return;
  const text = ui.composer.value;
  if (!text.trim() && !state.files.length) return;
  await answer(state.editing ? 'edit' : 'new');
}

/** Run one answer: mode "new" | "regenerate" | "edit". */
async function answer(mode) {
  if (state.answering) return;
  const text = mode === 'regenerate' ? '' : ui.composer.value;
  const pendingFiles = mode === 'regenerate' ? [] : state.files.slice();
  const tool = ui.toolChoice.value || null;  // this message's answer calls it
  setAnswering(true);
  composerNote('');
  clearErrors();
  hideProgress();
  setBusyNote('');

  let files = [];
  let chat;
  try {
    files = mode === 'regenerate' ? [] : await collectFiles();
    chat = await ensureChat();
  } catch (e) {
    setAnswering(false);
    showError(e && e.message ? e.message : 'A file could not be read.');
    return;
  }
  markActive();

  dropForMode(mode);
  let userNode = null;
  const userMsg = {
    role: 'user', content: text,
    attachments: pendingFiles.map((f) => ({ name: f.name, kind: '', pages: null, size: f.size })),
  };
  if (mode !== 'regenerate') {
    userNode = userMessage(userMsg);
    ui.messages.appendChild(userNode);
    ui.composer.value = '';
    autosize();
    state.files = [];
    renderChips();
    state.editing = false;
    ui.toolChoice.value = '';
  }
  const view = assistantView();
  ui.messages.appendChild(view.node);
  updateActions();
  updateEmpty();
  scrollToBottom();

  const run = {
    view, content: '', reasoning: '', live: null, stats: null,
    started: false, finished: false, error: null, interrupted: false, frame: 0,
    chatId: chat.id, calls: new Map(), toolCalls: [], toolMsgs: [], segments: [],
  };
  const controller = new AbortController();
  state.controller = controller;
  state.answerId = null;

  try {
    const res = await fetch(chatUrl(chat.id) + '/answer', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
      body: JSON.stringify({ text, files, mode, tool }),
      signal: controller.signal,
    });
    if (res.status === 401) {
      toSignin();
      throw new ApiError('Sign-in needed.');
    }
    if (!res.ok || !res.body) {
      let data = null;
      try { data = await res.json(); } catch (e) { data = null; }
      throw new ApiError(errorMessage(data, `The server answered ${res.status}.`));
    }
    await readEvents(res, (ev) => onEvent(run, ev));
    if (!run.finished && !run.error) run.interrupted = true;
  } catch (e) {
    if (e && e.name === 'AbortError') {
      run.interrupted = true;
    } else {
      run.error = (e && e.message) || 'The answer failed.';
    }
  } finally {
    if (state.controller === controller) state.controller = null;
  }
  finishRun(run, { text, pendingFiles, userNode, userMsg, mode, chat });
}

function onEvent(run, ev) {
  switch (ev.event) {
    case 'start':
      run.started = true;
      state.answerId = ev.answer_id || null;
      if (ev.chat && state.chat && ev.chat.id === state.chat.id && ev.chat.title) {
        state.chat.title = ev.chat.title;
      }
      break;
    case 'progress':
      showProgress(ev);
      break;
    case 'delta':
      hideProgress();
      onDelta(run, ev);
      break;
    case 'tool_call':
      hideProgress();
      onToolCall(run, ev);
      break;
    case 'tool_result':
      onToolResult(run, ev);
      break;
    case 'step':
      hideProgress();
      onStep(run, ev);
      break;
    case 'done':
      hideProgress();
      run.finished = true;
      run.stats = Object.assign({}, ev.stats || {}, { finish_reason: ev.finish_reason });
      if (ev.finish_reason === 'interrupted' || ev.finish_reason === 'cancelled') run.interrupted = true;
      break;
    case 'error':
      hideProgress();
      run.error = ev.message || 'The answer failed.';
      break;
    default:
      break;
  }
}

function onDelta(run, ev) {
  // Only kept here: the page changes at the next render (scheduleRender), not per event.
  if (ev.reasoning) {
    run.reasoning += ev.reasoning;
    run.pendingThought = (run.pendingThought || '') + ev.reasoning;
  }
  if (ev.content) run.content += ev.content;
  if (ev.live) run.live = ev.live;
  scheduleRender(run);
}

/** The figures and the thought as the last events left them (called by the render). */
function renderLive(run) {
  const view = run.view;
  if (run.pendingThought) {
    ensureThought(view);
    view.thoughtBody.append(run.pendingThought);  // a text node more: nothing laid out again
    run.pendingThought = '';
  }
  if (run.live) {
    setBusyNote(run.live.threads_note || '');
    if (run.live.context_used !== undefined) setMeter(run.live.context_used);
  }
  if (view.thought) {
    const thinking = !run.content;
    const tokens = run.live && run.live.thinking_tokens;
    view.thoughtLabel.textContent = thoughtLabel(thinking, tokens);
    show(view.answerNow, thinking && Boolean(state.answerId));
  }
}

// While an answer streams the page renders at most this often, and only what changed: the
// blocks that are complete (up to a blank line outside a code fence) are rendered once, the
// block being written again each time. On a machine without a GPU the browser shares the
// cores that decode (benchmarks/bench_overhead.py --paths web).
const RENDER_EVERY_MS = 400;

function scheduleRender(run) {
  if (run.frame || run.timer) return;
  const wait = Math.max(0, (run.renderedAt || 0) + RENDER_EVERY_MS - performance.now());
  run.timer = setTimeout(() => {
    run.timer = 0;
    run.frame = requestAnimationFrame(() => {
      run.frame = 0;
      renderStreaming(run);
    });
  }, wait);
}

function stopRendering(run) {
  if (run.frame) cancelAnimationFrame(run.frame);
  if (run.timer) clearTimeout(run.timer);
  run.frame = 0;
  run.timer = 0;
  renderLive(run);
  run.view.doneNode = null;  // the whole text is rendered again, once
}

function renderStreaming(run) {
  run.renderedAt = performance.now();
  const stick = nearBottom();
  renderLive(run);
  const view = run.view;
  const text = run.content;
  if (!view.doneNode) {
    view.doneNode = el('div', 'md-done');
    view.tailNode = el('div', 'md-tail');
    view.content.replaceChildren(view.doneNode, view.tailNode);
    run.doneLen = 0;
    run.scanAt = 0;
    run.fence = false;
  }
  let cut = run.doneLen;
  let at = run.scanAt;
  for (let nl = text.indexOf('\n', at); nl >= 0; nl = text.indexOf('\n', at)) {
    const line = text.slice(at, nl);
    if (/^\s*(```|~~~)/.test(line)) run.fence = !run.fence;
    if (!run.fence && line.trim() === '') cut = nl + 1;
    at = nl + 1;
  }
  run.scanAt = at;
  if (cut > run.doneLen) {
    view.doneNode.appendChild(renderMarkdown(text.slice(run.doneLen, cut)));
    run.doneLen = cut;
  }
  view.tailNode.replaceChildren(renderMarkdown(text.slice(run.doneLen)));
  if (stick) scrollToBottom();
}

function finishRun(run, ctx) {
  const view = run.view;
  stopRendering(run);
  state.answerId = null;
  settlePending(run);
  if (state.chat !== ctx.chat) {
    // The user opened another chat meanwhile; the server keeps the saved copy.
    hideProgress();
    setBusyNote('');
    setAnswering(false);
    refreshChats();
    return;
  }
  view.content.replaceChildren(renderMarkdown(run.content));
  if (view.thought) {
    const tokens = (run.stats && run.stats.thinking_tokens) || (run.live && run.live.thinking_tokens);
    view.thoughtLabel.textContent = thoughtLabel(false, tokens);
    show(view.answerNow, false);
  }
  hideProgress();
  setBusyNote('');
  state.answerId = null;

  const hasAnswer = Boolean(run.content || run.reasoning || run.toolCalls.length);
  if (run.stats) {
    setFigures(view, run.stats, run.interrupted);
    if (run.stats.context_used !== undefined) setMeter(run.stats.context_used, run.stats.context_limit);
  } else if (run.interrupted) {
    const live = run.live || {};
    setFigures(view, typeof live.tok_s === 'number' ? { decode_tok_s: live.tok_s } : {}, true);
  }

  const msgs = ctx.chat.messages = ctx.chat.messages || [];
  const saved = run.segments.slice();
  if (run.error && !hasAnswer) {
    view.node.remove();
  } else {
    const last = {
      role: 'assistant', content: run.content, thinking: run.reasoning,
      stats: run.stats, interrupted: run.interrupted, attachments: [],
    };
    if (run.toolCalls.length) last.tool_calls = run.toolCalls;
    saved.push(last, ...run.toolMsgs);
  }
  if (saved.length) {
    if (ctx.mode !== 'regenerate' && ctx.userNode) msgs.push(ctx.userMsg);
    msgs.push(...saved);
  }
  if (run.error) {
    if (!run.started && ctx.userNode) ctx.userNode.remove();
    if (ctx.mode !== 'regenerate') {
      // Keep what the user typed so they can send it again.
      if (!ui.composer.value) ui.composer.value = ctx.text;
      if (!state.files.length && ctx.pendingFiles.length) {
        state.files = ctx.pendingFiles;
        renderChips();
      }
      if (ctx.mode === 'edit' && !run.started) state.editing = true;
      autosize();
    }
    showError(run.error);
  }
  setAnswering(false);
  updateActions();
  updateEmpty();
  refreshChats();
}

function stopAnswer() {
  if (state.controller) state.controller.abort();
}

async function endThinking(btn) {
  const id = state.answerId;
  if (!id) return;
  btn.disabled = true;
  try {
    const res = await fetch('/v1/chat/completions/' + encodeURIComponent(id) + '/end_thinking', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: '{}',
    });
    if (res.status === 401) toSignin();
    else if (!res.ok) composerNote('The thought could not be ended.');
  } catch (e) {
    composerNote('The thought could not be ended.');
  }
  btn.disabled = false;
  show(btn, false);
}

// ---------------------------------------------------------------- settings

function fillSettings() {
  const src = state.chat || state.pendingSettings || {};
  ui.systemPrompt.value = src.system || '';
  ui.thinkingBudget.value = src.thinking_budget === null || src.thinking_budget === undefined
    ? '' : String(src.thinking_budget);
  ui.settingsNote.textContent = '';
}

function toggleSettings(open) {
  const willOpen = open === undefined ? ui.settingsPanel.hidden : open;
  if (willOpen) fillSettings();
  show(ui.settingsPanel, willOpen);
  ui.settingsButton.setAttribute('aria-expanded', String(willOpen));
  if (willOpen) ui.systemPrompt.focus();
}

async function saveSettings() {
  const raw = ui.thinkingBudget.value.trim();
  let budget = null;
  if (raw !== '') {
    budget = Number.parseInt(raw, 10);
    if (!Number.isFinite(budget) || budget < 0) {
      ui.settingsNote.textContent = 'The thinking budget is a whole number of tokens.';
      return;
    }
  }
  const body = { system: ui.systemPrompt.value.trim() ? ui.systemPrompt.value : null, thinking_budget: budget };
  if (!state.chat) {
    state.pendingSettings = body;
    ui.settingsNote.textContent = 'Saved; used for the new chat.';
    return;
  }
  ui.saveSettings.disabled = true;
  try {
    const chat = await api(chatUrl(state.chat.id), { method: 'PATCH', body });
    if (chat) {
      state.chat.system = chat.system;
      state.chat.thinking_budget = chat.thinking_budget;
      if (chat.title) state.chat.title = chat.title;
    }
    ui.settingsNote.textContent = 'Saved.';
  } catch (e) {
    ui.settingsNote.textContent = e.message;
  }
  ui.saveSettings.disabled = false;
}

// ---------------------------------------------------------------- composer / events

function autosize() {
  const c = ui.composer;
  c.style.height = 'auto';
  c.style.height = Math.min(c.scrollHeight + 2, Math.round(window.innerHeight * 0.4)) + 'px';
}

function hasFiles(e) {
  const dt = e.dataTransfer;
  return dt && Array.from(dt.types || []).includes('Files');
}

function wireDragAndDrop() {
  let depth = 0;
  document.addEventListener('dragenter', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth++;
    show(ui.dropOverlay, true);
  });
  document.addEventListener('dragover', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
  });
  document.addEventListener('dragleave', (e) => {
    if (!hasFiles(e)) return;
    depth = Math.max(0, depth - 1);
    if (!depth) show(ui.dropOverlay, false);
  });
  document.addEventListener('drop', (e) => {
    depth = 0;
    show(ui.dropOverlay, false);
    if (!e.dataTransfer || !e.dataTransfer.files || !e.dataTransfer.files.length) return;
    e.preventDefault();
    addFiles(e.dataTransfer.files);
  });
}

function wireComposer() {
  ui.send.addEventListener('click', send);
  ui.stop.addEventListener('click', stopAnswer);
  ui.attach.addEventListener('click', () => ui.fileInput.click());
  ui.fileInput.addEventListener('change', () => {
    addFiles(ui.fileInput.files);
    ui.fileInput.value = '';
  });
  ui.composer.addEventListener('input', autosize);
  ui.composer.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey && !e.ctrlKey && !e.metaKey) {
      e.preventDefault();
      send();
    }
  });
  ui.composer.addEventListener('paste', (e) => {
    const files = e.clipboardData && e.clipboardData.files;
    if (files && files.length) {
      e.preventDefault();
      addFiles(files);
    }
  });
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape') return;
    if (state.answering) {
      e.preventDefault();
      stopAnswer();
    } else if (document.body.classList.contains('drawer-open')) {
      openDrawer(false);
    } else if (!ui.settingsPanel.hidden) {
      toggleSettings(false);
    }
  });
}

function wireChrome() {
  ui.menu.addEventListener('click', () => openDrawer(!document.body.classList.contains('drawer-open')));
  ui.backdrop.addEventListener('click', () => openDrawer(false));
  ui.newChat.addEventListener('click', newChat);
  ui.settingsButton.addEventListener('click', () => toggleSettings());
  ui.saveSettings.addEventListener('click', saveSettings);
  window.addEventListener('hashchange', () => {
    const id = hashChatId();
    if (id && (!state.chat || state.chat.id !== id)) openChat(id);
    else if (!id && state.chat) newChat();
  });
}

async function main() {
  setAnswering(false);
  renderChips();
  wireChrome();
  wireComposer();
  wireDragAndDrop();
  updateEmpty();
  const infoDone = loadInfo();
  const listDone = refreshChats();
  const id = hashChatId();
  if (id) await openChat(id);
  await Promise.all([infoDone, listDone]);
  markActive();
  startHealthPolling();
}

main();
