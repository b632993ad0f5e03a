// Forms that make things: a job, a schedule, a resource. Each shows the
// API's refusal at the field it names.

import { ApiError, call, get, post } from './api.js';
import { failed } from './core.js';
import { h, jobHref } from './dom.js';
import { specEditor } from './editor.js';

// Examples of a job to start from: what the README's tours submit.
const EXAMPLES = [
  ['One step', { steps: [{ id: 'hello', action: { type: 'pass' } }] }],
  ['A Lambda function, retried', { payload: { order: 42 }, steps: [{ id: 'charge', action: { type: 'lambda', function: 'stepflow-fn-flaky' } }] }],
  ['A worker, then an approval', { payload: { name: 'ada' }, steps: [
    { id: 'greet', action: { type: 'worker', queue: 'greet' } },
    { id: 'ship', action: { type: 'approval' } }] }],
  ['A graph of steps', { queue: 'release', payload: { version: '1.4.2' }, steps: [
    { id: 'build', action: { type: 'pass' } },
    { id: 'test-unit', action: { type: 'pass' }, depends_on: ['build'] },
    { id: 'test-e2e', action: { type: 'pass' }, depends_on: ['build'] },
    { id: 'gate', action: { type: 'approval' }, depends_on: ['test-unit', 'test-e2e'] },
    { id: 'deploy', action: { type: 'pass' }, depends_on: ['gate'] }] }],
  ['A step per item (map)', { payload: { pages: ['a', 'b', 'c'] }, steps: [
    { id: 'each', action: { type: 'map', items: 'payload.pages', max_concurrency: 2, step: { action: { type: 'pass' } } } }] }],
  ['Wait for a signal', { steps: [
    { id: 'paid', action: { type: 'wait', signal: 'payment', timeout_seconds: 3600 } },
    { id: 'ship', action: { type: 'pass' } }] }],
  ['Sleep, then go on', { steps: [
    { id: 'nap', action: { type: 'sleep', seconds: 30 } },
    { id: 'wake', action: { type: 'pass' } }] }],
];

// What a person typed into the new-job editor, kept while the page is
// open (across views), so leaving it loses nothing.
let jobDraft = null;

function exampleSelect(onPick) {
  return h('label', { class: 'example' }, 'Start from ',
    h('select', {
      name: 'example',
      onchange: (e) => {
        if (e.target.value !== '') onPick(EXAMPLES[Number(e.target.value)][1]);
        e.target.value = '';
      },
    }, h('option', { value: '' }, 'an example…'), EXAMPLES.map(([name], i) => h('option', { value: String(i) }, name))));
}

// submitting runs a form's request with its button disabled; fail(err)
// shows the API's refusal and answers whether it placed it.
async function submitting(button, generalError, request, fail) {
  button.disabled = true;
  generalError.hidden = true;
  try {
    await request();
  } catch (err) {
    if (err && err.name === 'AbortError') return;
    if (err instanceof ApiError && err.status === 401) {
      failed(err);
      return;
    }
    if (!(err instanceof ApiError && fail(err))) {
      generalError.textContent = err instanceof ApiError ? err.describe() : String(err);
      generalError.hidden = false;
    }
  } finally {
    button.disabled = false;
  }
}

// fields lays out a form's controls, each with a place for its error, and
// answers row(), clear() and a fail(err) that shows the error beside the
// control the API's field names (by its first member: capabilities[2] is
// the capabilities input), answering whether one did.
function fields(controls, strip = '') {
  const errors = new Map();
  const row = (name, label, control, hint) => {
    const err = h('p', { class: 'error field-error', id: `${control.id}-error`, role: 'alert' });
    err.hidden = true;
    errors.set(name, err);
    control.setAttribute('aria-describedby', `${control.id}-error`);
    return h('div', { class: 'field', 'data-field': name },
      h('label', { for: control.id }, label), control, hint ? h('p', { class: 'muted small' }, hint) : null, err);
  };
  const clear = () => {
    for (const [name, err] of errors) {
      err.hidden = true;
      controls[name].removeAttribute('aria-invalid');
    }
  };
  const fail = (err) => {
    const field = (err.field || '').replace(strip, '');
    const name = /^[^.[]*/.exec(field)[0];
    if (!errors.has(name)) return false;
    const el = errors.get(name);
    el.textContent = err.local ? err.message : err.describe();
    el.hidden = false;
    controls[name].setAttribute('aria-invalid', 'true');
    controls[name].focus();
    return true;
  };
  return { row, clear, fail };
}

// localError is a refusal of the page's own, before anything is sent.
function localError(field, message) {
  const e = new ApiError(400, 'invalid', `${field}: ${message}`, field);
  e.local = true;
  return e;
}

// loadFailed shows why a form could not load what it edits.
function loadFailed(err, general) {
  if (err && err.name === 'AbortError') return;
  if (err instanceof ApiError && err.status === 401) {
    failed(err);
    return;
  }
  general.textContent = err instanceof ApiError ? err.describe() : String(err);
  general.hidden = false;
}

// ---------------------------------------------------------------- a job

export function newJobView({ main }) {
  if (!jobDraft) jobDraft = { text: JSON.stringify(EXAMPLES[0][1], null, 2) + '\n', format: 'json' };
  const editor = specEditor({
    id: 'spec', label: 'Job spec', text: jobDraft.text, format: jobDraft.format,
    onChange: (text, format) => { jobDraft = { text, format }; },
  });
  const general = h('p', { class: 'error', id: 'new-job-error', role: 'alert' });
  general.hidden = true;
  const button = h('button', { type: 'submit', class: 'primary', id: 'submit-job' }, 'Submit');
  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/jobs' }, 'Jobs'), ' / new'),
    h('h1', null, 'New job'),
    h('form', {
      id: 'new-job', class: 'card form',
      onsubmit: (e) => {
        e.preventDefault();
        editor.clear();
        submitting(button, general, async () => {
          const job = await post('v1/jobs', editor.value());
          jobDraft = null; // submitted: the next new job starts afresh
          location.hash = jobHref(job.id);
        }, (err) => editor.fail(err));
      },
    },
    h('p', { class: 'muted' }, 'The job as POST /v1/jobs takes it: its steps, and optionally its payload, queue, priority and run_at. Write it in JSON or YAML; it is sent as JSON.'),
    exampleSelect((v) => editor.set(v)),
    editor.el,
    h('div', { class: 'actions' }, button),
    general));
}

// ---------------------------------------------------------------- a schedule

export function scheduleFormView({ signal, main }, id) {
  const editing = Boolean(id);
  const c = {
    id: h('input', { id: 'schedule-id', name: 'id', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'nightly-report' }),
    cron: h('input', { id: 'schedule-cron', name: 'cron', autocomplete: 'off', spellcheck: 'false', placeholder: '0 9 * * 1-5' }),
    time_zone: h('input', { id: 'schedule-tz', name: 'time_zone', autocomplete: 'off', spellcheck: 'false', placeholder: 'UTC' }),
    every: h('input', { id: 'schedule-every', name: 'every', autocomplete: 'off', spellcheck: 'false', placeholder: '15m' }),
    overlap: h('select', { id: 'schedule-overlap', name: 'overlap' },
      h('option', { value: 'skip' }, 'skip a tick while the last run is unfinished'),
      h('option', { value: 'allow' }, 'allow runs to overlap')),
  };
  const editor = specEditor({ id: 'schedule-job', label: 'Job each tick submits', text: JSON.stringify(EXAMPLES[0][1], null, 2) + '\n' });
  const f = fields(c);
  const general = h('p', { class: 'error', id: 'schedule-form-error', role: 'alert' });
  general.hidden = true;
  const button = h('button', { type: 'submit', class: 'primary', id: 'save-schedule' }, editing ? 'Save' : 'Create');
  let loaded = ''; // the schedule as read, to tell whether the form changed it
  const form = h('form', {
    id: 'schedule-form', class: 'card form',
    onsubmit: (e) => {
      e.preventDefault();
      f.clear();
      editor.clear();
      submitting(button, general, async () => {
        const spec = { id: c.id.value.trim() };
        for (const k of ['cron', 'time_zone', 'every']) if (c[k].value.trim()) spec[k] = c[k].value.trim();
        spec.overlap = c.overlap.value;
        spec.job = editor.value();
        // Unchanged, it is left as it is (replacing it would restart its counts).
        if (!editing || canonical(spec) !== loaded) await saveSchedule(spec, editing, signal);
        location.hash = '#/schedules';
      }, (err) => f.fail(err) || editor.fail(err, 'job.'));
    },
  },
  f.row('id', 'Id', c.id, editing ? 'A schedule keeps its id.' : null),
  h('div', { class: 'field-pair' },
    f.row('cron', 'Cron', c.cron, 'Five fields: minute hour day-of-month month day-of-week.'),
    f.row('time_zone', 'Time zone', c.time_zone, 'With cron; an IANA name (default UTC).')),
  f.row('every', 'Or every', c.every, 'A duration from 1s to 8784h: 30s, 15m, 24h.'),
  f.row('overlap', 'Overlap', c.overlap),
  exampleSelect((v) => editor.set(v)),
  editor.el,
  editing ? h('p', { class: 'muted', id: 'schedule-replace-note' },
    'Saving replaces its definition (PUT): its runs, its last run and a pause are kept, ',
    'and its next tick is the new timing\'s first from now.') : null,
  h('div', { class: 'actions' }, button, h('a', { href: '#/schedules' }, 'Cancel')),
  general);
  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/schedules' }, 'Schedules'), ' / ', editing ? h('span', { class: 'mono' }, id) : 'new'),
    h('h1', null, editing ? 'Edit schedule' : 'New schedule'),
    form);
  if (!editing) {
    c.id.focus();
    return;
  }
  c.id.value = id;
  c.id.readOnly = true;
  button.disabled = true;
  get(`v1/schedules/${encodeURIComponent(id)}`, { signal }).then((sc) => {
    for (const k of ['cron', 'time_zone', 'every']) c[k].value = sc[k] || '';
    c.overlap.value = sc.overlap || 'skip';
    editor.set(sc.job);
    const given = (k) => sc[k] || undefined; // as the form sends them: only when set
    loaded = canonical({ id: sc.id, cron: given('cron'), time_zone: given('time_zone'), every: given('every'), overlap: sc.overlap, job: sc.job });
    button.disabled = false;
  }, (err) => loadFailed(err, general));
}

// canonical answers v as JSON with its members in order, so that two
// specs that mean the same compare equal.
function canonical(v) {
  return JSON.stringify(v, (_, x) => (x && typeof x === 'object' && !Array.isArray(x)
    ? Object.fromEntries(Object.keys(x).sort().map((k) => [k, x[k]]))
    : x));
}

// saveSchedule creates a schedule; editing, it replaces one's definition
// in place (PUT: its runs and a pause kept). A refusal (400) changes
// nothing.
async function saveSchedule(spec, editing, signal) {
  if (editing) {
    await call('PUT', `v1/schedules/${encodeURIComponent(spec.id)}`, spec, { signal });
    return;
  }
  await post('v1/schedules', spec, { signal });
}

// ---------------------------------------------------------------- a resource

// words splits "gpu, cuda" or "gpu cuda" into its words.
function words(text) {
  return text.split(/[\s,]+/).filter(Boolean);
}

export function resourceFormView({ signal, main }, id) {
  const editing = Boolean(id);
  const c = {
    id: h('input', { id: 'resource-id', name: 'id', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'gpu-1' }),
    // No min or max: the API's own bounds, and its message, apply.
    capacity: h('input', { id: 'resource-capacity', name: 'capacity', type: 'number', value: '1' }),
    capabilities: h('input', { id: 'resource-capabilities', name: 'capabilities', autocomplete: 'off', spellcheck: 'false', placeholder: 'gpu, cuda' }),
    labels: h('input', { id: 'resource-labels', name: 'labels', autocomplete: 'off', spellcheck: 'false', placeholder: 'zone=a, size=xl' }),
  };
  const f = fields(c, /^body\./); // PUT names the body's members under body.
  const general = h('p', { class: 'error', id: 'resource-form-error', role: 'alert' });
  general.hidden = true;
  const button = h('button', { type: 'submit', class: 'primary', id: 'save-resource' }, editing ? 'Save' : 'Create');
  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/resources' }, 'Resources'), ' / ', editing ? h('span', { class: 'mono' }, id) : 'new'),
    h('h1', null, editing ? 'Edit resource' : 'New resource'),
    h('form', {
      id: 'resource-form', class: 'card form',
      onsubmit: (e) => {
        e.preventDefault();
        f.clear();
        submitting(button, general, async () => {
          const labels = {};
          for (const w of words(c.labels.value)) {
            const eq = w.indexOf('=');
            if (eq < 0) throw localError('labels', `"${w}" is not key=value`);
            labels[w.slice(0, eq)] = w.slice(eq + 1);
          }
          const capacity = Number(c.capacity.value);
          const spec = { capabilities: words(c.capabilities.value), labels, capacity: c.capacity.value === '' ? undefined : capacity };
          await call('PUT', `v1/resources/${encodeURIComponent(c.id.value.trim())}`, spec, { signal });
          location.hash = '#/resources';
        }, (err) => f.fail(err));
      },
    },
    f.row('id', 'Id', c.id, editing ? 'A resource keeps its id.' : null),
    f.row('capacity', 'Slots', c.capacity, 'How many steps may hold it at once (1 to 1000).'),
    f.row('capabilities', 'Capabilities', c.capabilities, 'What a step may require of it, separated by commas or spaces.'),
    f.row('labels', 'Labels', c.labels, 'key=value pairs, separated by commas or spaces.'),
    editing ? h('p', { class: 'muted' }, 'Slots held stay held; a lower capacity frees none.') : null,
    h('div', { class: 'actions' }, button, h('a', { href: '#/resources' }, 'Cancel')),
    general));
  if (!editing) {
    c.id.focus();
    return;
  }
  c.id.value = id;
  c.id.readOnly = true;
  button.disabled = true;
  get(`v1/resources/${encodeURIComponent(id)}`, { signal }).then((r) => {
    c.capacity.value = String(r.capacity);
    c.capabilities.value = (r.capabilities || []).join(', ');
    c.labels.value = Object.entries(r.labels || {}).map(([k, v]) => `${k}=${v}`).join(', ');
    button.disabled = false;
  }, (err) => loadFailed(err, general));
}
