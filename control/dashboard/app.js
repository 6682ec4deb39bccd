// Tessera's node dashboard (docs/CONTROL.md, "The dashboard"): the state pushed over the API's
// WebSocket, and its actions as POSTs with the token. Every text from the node (a job's name, a log
// line) is set as text, never as markup.
'use strict';

const api = '/api/v1/';
const $ = (id) => document.getElementById(id);
let token = '';
let socket = null;
let retryMs = 500;
let retries = 0; // since the node last answered: the page gives up after MaxRetries
const MaxRetries = 12; // about a minute: then it waits for a reload (which asks the node again)
let last = null;
// What the browser test reads: when each pushed state came (ms since the epoch), and how many came.
// And each shard's steps as the page showed them.
window.tessera = { pushes: 0, lastPushAt: 0, state: null, steps: {} };

function takeToken() {
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.has('token')) {
    sessionStorage.setItem('tessera-token', hash.get('token'));
    history.replaceState(null, '', location.pathname); // out of the address bar and its history
  }
  return sessionStorage.getItem('tessera-token') || '';
}

function showLogin(why) {
  $('main').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = why || '';
}

async function call(method, path, body) {
  const response = await fetch(api + path, {
    method,
    headers: { Authorization: 'Bearer ' + token, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  const answer = await response.json().catch(() => ({ error: 'the node sent no JSON' }));
  if (!response.ok) throw new Error(answer.error || 'HTTP ' + response.status);
  return answer;
}

async function act(action, body, errorId = 'action-error') {
  $(errorId).textContent = '';
  try {
    render(await call('POST', action, body || {}));
  } catch (error) {
    $(errorId).textContent = error.message;
  }
}

function connect() {
  socket = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${api}events?token=${encodeURIComponent(token)}`);
  socket.onopen = () => { retryMs = 500; retries = 0; $('link').textContent = 'live'; $('link').classList.add('live'); };
  socket.onmessage = (event) => {
    window.tessera.pushes += 1;
    window.tessera.lastPushAt = Date.now();
    render(JSON.parse(event.data));
  };
  socket.onclose = () => {
    $('link').textContent = 'offline';
    $('link').classList.remove('live');
    retry();
  };
}

// Asks again a while later. Not forever: whatever holds the port after the node stopped would be
// sent the token each time.
function retry() {
  if (++retries > MaxRetries) {
    $('link').textContent = 'offline: reload the page once the node runs';
    return;
  }
  setTimeout(start, retryMs);
  retryMs = Math.min(retryMs * 2, 10000);
}

// Checks the token with one request (a WebSocket cannot say 401), then listens.
async function start() {
  try {
    render(await call('GET', 'state'));
  } catch (error) {
    if (/token/.test(error.message)) {
      sessionStorage.removeItem('tessera-token');
      return showLogin('The node refused that token: ' + error.message + '.');
    }
    $('link').textContent = 'offline';
    return retry();
  }
  $('login').hidden = true;
  $('main').hidden = false;
  connect();
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text === null || text === undefined ? '—' : String(text);
  if (className) td.className = className;
  return td;
}

function duration(ms) {
  const s = Math.round(ms / 1000);
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
  return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
}

function renderShard(shard) {
  $('shard').hidden = !shard;
  $('shard-none').hidden = !!shard;
  if (!shard) return;
  const stage = shard.stages ? `, stage ${shard.stage + 1} of ${shard.stages}` : '';
  $('shard-what').textContent = `job ${shard.job}, round ${shard.round + 1}, shard ${shard.shard + 1}${stage}`;
  const progress = $('progress');
  progress.style.width = (shard.steps ? (100 * shard.step) / shard.steps : 0) + '%';
  progress.dataset.step = shard.step;
  const key = `${shard.job}/${shard.round}/${shard.shard}`;
  const seen = (window.tessera.steps[key] = window.tessera.steps[key] || []);
  if (seen[seen.length - 1] !== shard.step) seen.push(shard.step);
  $('shard-detail').textContent = `step ${shard.step} of ${shard.steps}` +
    (Number.isFinite(shard.loss) ? `, loss ${shard.loss.toFixed(3)}` : '') +
    (shard.etaMs >= 1000 ? `, about ${duration(shard.etaMs)} left` : '');
}

function renderDevices(devices) {
  const body = $('devices');
  body.replaceChildren();
  for (const device of devices || []) {
    const row = body.insertRow();
    cell(row, `${device.name} (${device.id})` + (device.usable ? '' : ` — ${device.why || 'not usable'}`));
    cell(row, device.load === null ? null : device.load + ' %');
    cell(row, device.temperatureC === null ? null : device.temperatureC + ' °C');
    cell(row, device.watts === null ? null : device.watts + ' W');
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = device.paused ? 'Resume device' : 'Pause device';
    button.disabled = !device.usable;
    button.onclick = () => act('device', { device: device.id, paused: !device.paused });
    row.insertCell().append(button);
  }
}

function renderLimits(limits) {
  const form = $('limits');
  const keys = Object.keys(limits || {});
  if (form.dataset.keys !== keys.join()) { // built once for its keys
    form.replaceChildren();
    form.dataset.keys = keys.join();
    for (const key of keys) {
      const label = document.createElement('label');
      label.textContent = key;
      const input = document.createElement('input');
      input.name = key;
      input.type = typeof limits[key] === 'boolean' ? 'checkbox' : typeof limits[key] === 'number' ? 'number' : 'text';
      label.append(input);
      form.append(label);
    }
    const save = document.createElement('button');
    save.type = 'submit';
    save.textContent = 'Save limits';
    form.append(save);
  }
  for (const key of keys) {
    const input = form.elements[key];
    if (input === document.activeElement) continue; // someone is typing
    if (input.type === 'checkbox') input.checked = limits[key]; else input.value = limits[key];
  }
}

function renderChart(days) {
  const svg = $('chart');
  svg.replaceChildren();
  const most = Math.max(1e-9, ...days.map((d) => Number(d.credits)));
  const ns = 'http://www.w3.org/2000/svg';
  days.forEach((day, i) => {
    const credits = Number(day.credits);
    const height = (credits / most) * 110;
    const bar = document.createElementNS(ns, 'rect');
    bar.setAttribute('x', 10 + i * 48);
    bar.setAttribute('y', 125 - height);
    bar.setAttribute('width', 36);
    bar.setAttribute('height', height);
    const title = document.createElementNS(ns, 'title');
    title.textContent = `${day.day}: ${day.credits} credits`;
    bar.append(title);
    const label = document.createElementNS(ns, 'text');
    label.setAttribute('x', 12 + i * 48);
    label.setAttribute('y', 142);
    label.textContent = day.day.slice(5);
    const value = document.createElementNS(ns, 'text');
    value.setAttribute('x', 12 + i * 48);
    value.setAttribute('y', 120 - height);
    value.textContent = credits ? credits.toFixed(2) : '';
    svg.append(bar, label, value);
  });
}

function renderEarnings(earnings, stake) {
  $('today').textContent = earnings.today || '0';
  $('week').textContent = earnings.week || '0';
  $('stake').textContent = stake ? `${stake.balance} credits held and ${stake.stake} bonded at ${stake.broker}` : '';
  renderChart(earnings.days || []);
  const jobs = $('jobs');
  jobs.replaceChildren();
  for (const job of earnings.jobs || []) {
    const row = jobs.insertRow();
    cell(row, job.job);
    cell(row, job.credits);
  }
}

function renderResults(results) {
  const body = $('results');
  body.replaceChildren();
  for (const result of results || []) {
    const row = body.insertRow();
    cell(row, result.jobId);
    cell(row, result.round + 1);
    cell(row, result.shard + 1);
    cell(row, result.state, 'state-' + result.state);
    cell(row, result.paid || null);
    cell(row, result.detail || '', 'why');
  }
}

function renderLog(lines) {
  const log = $('log');
  log.replaceChildren();
  for (const line of (lines || []).slice().reverse()) { // newest first
    const item = document.createElement('li');
    item.className = line.level;
    item.textContent = `${new Date(line.at).toLocaleTimeString()}  ${line.text}`;
    log.append(item);
  }
}

function render(state) {
  last = state;
  window.tessera.state = state;
  document.title = `Tessera: ${state.name} (${state.state})`;
  $('name').textContent = state.name;
  $('state').textContent = state.state;
  $('state').dataset.state = state.state;
  $('reason').textContent = state.reason + (state.finishThenPause && !/then pausing/.test(state.reason) ? ' (then pausing)' : '');
  $('pause').disabled = state.paused;
  $('resume').disabled = !state.paused && !state.finishThenPause && !['paused', 'snoozed'].includes(state.state);
  $('finish').disabled = state.paused || state.finishThenPause;
  renderShard(state.shard);
  renderDevices(state.devices);
  renderLimits(state.limits);
  renderEarnings(state.earnings || {}, state.stake);
  renderResults(state.results);
  renderLog(state.log);
}

function showTab(name) {
  for (const link of document.querySelectorAll('nav a')) link.classList.toggle('active', link.dataset.tab === name);
  for (const tab of document.querySelectorAll('.tab')) tab.hidden = tab.id !== 'tab-' + name;
}

// The changed limits; an error for a number left empty (it would read as 0, which often means "none").
function limitsFrom(form) {
  const limits = {};
  for (const input of form.querySelectorAll('input')) {
    if (input.type === 'number' && input.value.trim() === '') throw new Error(`${input.name} needs a number`);
    const was = last && last.limits ? last.limits[input.name] : undefined;
    const value = input.type === 'checkbox' ? input.checked : input.type === 'number' ? Number(input.value) : input.value;
    if (value !== was) limits[input.name] = value;
  }
  return limits;
}

document.addEventListener('DOMContentLoaded', () => {
  for (const link of document.querySelectorAll('nav a')) {
    link.addEventListener('click', (event) => { event.preventDefault(); showTab(link.dataset.tab); });
  }
  $('pause').onclick = () => act('pause');
  $('resume').onclick = () => act('resume');
  $('finish').onclick = () => act('finish');
  $('snooze').onclick = () => act('snooze', { minutes: Number($('snooze-minutes').value) });
  $('limits').addEventListener('submit', (event) => {
    event.preventDefault();
    let limits;
    try {
      limits = limitsFrom(event.target);
    } catch (error) {
      return ($('limits-error').textContent = error.message);
    }
    if (Object.keys(limits).length === 0) return ($('limits-error').textContent = 'Nothing changed.');
    act('limits', limits, 'limits-error');
  });
  $('login-form').addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem('tessera-token', $('token').value.trim());
    token = $('token').value.trim();
    start();
  });
  token = takeToken();
  if (!token) return showLogin('');
  start();
});
