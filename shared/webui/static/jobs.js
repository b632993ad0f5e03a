// The jobs list and the job page.

import { ApiError, get, jobPath, post } from './api.js';
import { act, failed, hideBanner, onHealth, poller, sleep, whenVisible } from './core.js';
import { drawDag } from './dag.js';
import { costText, dollars, dur, h, jobHref, json, pill, stepChild, timeEl, ulidTime } from './dom.js';

export const JOB_STATES = ['QUEUED', 'RUNNING', 'WAITING', 'PARKED', 'RETRYING', 'COMPLETED', 'FAILED', 'CANCELLED'];
const TERMINAL = new Set(['COMPLETED', 'FAILED', 'CANCELLED']);
const STEP_DONE = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'SKIPPED']);
const PAGE = 25;
const FILTERS = ['state', 'queue', 'schedule', 'parent', 'id_prefix', 'created_after', 'created_before'];
const SHOWN_CHILDREN = 10; // a job's page names this many children; the list has them all

// What each of a job's usage units is, as its cost breakdown names them.
const UNITS = {
  dynamodb_write_units: 'DynamoDB write units',
  dynamodb_read_units: 'DynamoDB read units',
  sqs_requests: 'SQS requests',
  lambda_requests: 'Lambda requests',
  lambda_gb_seconds: 'Lambda GB-seconds',
  api_requests: 'API Gateway requests',
  s3_write_requests: 'S3 write requests',
  s3_read_requests: 'S3 read requests',
  events: 'EventBridge events',
  sfn_transitions: 'Step Functions transitions',
  table_gb_months: 'table storage, GB-months',
  s3_gb_months: 'S3 storage, GB-months',
};

function listHref(f) {
  const q = new URLSearchParams();
  for (const k of FILTERS) if (f[k]) q.set(k, f[k]);
  const qs = q.toString();
  return '#/jobs' + (qs ? '?' + qs : '');
}

// localInput answers an RFC 3339 time as a datetime-local input shows it,
// in the browser's zone ('' for none or garbage).
function localInput(iso) {
  const d = new Date(iso || '');
  if (!iso || isNaN(d)) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

// rfc3339 answers a datetime-local input's value (the browser's zone) as
// the API takes a time.
function rfc3339(local) {
  const d = new Date(local);
  return local && !isNaN(d) ? d.toISOString() : '';
}

// jobLink links a job's page, its id the text.
function jobLink(id, attrs) {
  return h('a', { class: 'job-link mono', href: jobHref(id), ...attrs }, id);
}

// ---------------------------------------------------------------- the list

export function jobsView({ signal, params, main }) {
  const filter = {
    state: (params.get('state') || '').toUpperCase(),
    queue: params.get('queue') || '',
    schedule: params.get('schedule') || '',
    parent: params.get('parent') || '', // a job's children (GET /v1/jobs?parent=)
    // A search: ids are ULIDs, so the API reads these as one range of ids.
    id_prefix: (params.get('id_prefix') || '').trim(),
    created_after: params.get('created_after') || '',
    created_before: params.get('created_before') || '',
  };
  const cursors = ['']; // the cursor of each page seen, newest page first
  let page = 0;
  let next = '';

  // Counts come from the tenant's health figures, which the engine keeps
  // as counters: counting jobs by listing them would read every job.
  const tiles = h('div', { class: 'tiles' });
  onHealth((hl) => {
    const tile = (label, value, state, note) =>
      h('a', { class: ['tile', filter.state === state && 'on'], href: listHref({ ...filter, state }), title: note },
        h('span', { class: 'n' }, value), h('span', { class: 'label' }, label));
    tiles.replaceChildren(
      tile('backlog (queued)', hl.backlog, 'QUEUED', 'jobs submitted and not started'),
      tile('waiting on a person', hl.blocked, 'WAITING', 'jobs blocked on an approval or a person'),
      tile('completed, 24 h', hl.completed_24h, 'COMPLETED', 'jobs completed in the last 24 hours'),
      tile('failed, 24 h', hl.failed_24h, 'FAILED', 'jobs failed in the last 24 hours'),
      tile('cancelled, 24 h', hl.cancelled_24h, 'CANCELLED', 'jobs cancelled in the last 24 hours'),
    );
  }, signal);

  const chips = h('nav', { class: 'chips', 'aria-label': 'state' },
    h('a', { class: ['chip', !filter.state && 'on'], href: listHref({ ...filter, state: '' }) }, 'all'),
    JOB_STATES.map((st) => h('a', { class: ['chip', filter.state === st && 'on'], href: listHref({ ...filter, state: st }), 'data-state': st }, st.toLowerCase())));

  const inputs = {
    queue: h('input', { name: 'queue', value: filter.queue, placeholder: 'any queue', 'aria-label': 'queue' }),
    schedule: h('input', { name: 'schedule', value: filter.schedule, placeholder: 'any schedule', 'aria-label': 'schedule' }),
    id_prefix: h('input', { name: 'id_prefix', value: filter.id_prefix, placeholder: '01J…', 'aria-label': 'id starts with', spellcheck: 'false', autocomplete: 'off', class: 'mono' }),
    created_after: h('input', { type: 'datetime-local', step: 1, name: 'created_after', value: localInput(filter.created_after), 'aria-label': 'created after' }),
    created_before: h('input', { type: 'datetime-local', step: 1, name: 'created_before', value: localInput(filter.created_before), 'aria-label': 'created before' }),
  };
  const searchError = h('p', { class: 'error', id: 'jobs-error', role: 'alert' });
  searchError.hidden = true;
  const filtered = FILTERS.some((k) => filter[k]);
  const form = h('form', {
    class: 'filters', id: 'job-filters',
    onsubmit: (e) => {
      e.preventDefault();
      location.hash = listHref({
        ...filter,
        queue: inputs.queue.value.trim(),
        schedule: inputs.schedule.value.trim(),
        id_prefix: inputs.id_prefix.value.trim(),
        created_after: rfc3339(inputs.created_after.value),
        created_before: rfc3339(inputs.created_before.value),
      });
    },
  }, h('label', null, 'queue ', inputs.queue), h('label', null, 'schedule ', inputs.schedule),
  h('label', null, 'id starts with ', inputs.id_prefix),
  h('label', null, 'created after ', inputs.created_after),
  h('label', null, 'before ', inputs.created_before),
  h('button', { type: 'submit' }, 'Search'),
  filtered && h('a', { href: '#/jobs', class: 'clear' }, 'clear filters'));

  const tbody = h('tbody');
  const newer = h('button', { type: 'button', onclick: () => { page--; kick(); } }, '← newer');
  const older = h('button', { type: 'button', onclick: () => { cursors[page + 1] = next; page++; kick(); } }, 'older →');
  const where = h('span', { class: 'muted' });
  const pager = h('div', { class: 'pager' }, newer, where, older);

  main.append(
    h('div', { class: 'titled' }, h('h1', null, 'Jobs'), h('a', { class: 'button primary', href: '#/new', id: 'new-job-link' }, 'New job')),
    tiles,
    h('div', { class: 'toolbar' }, chips, form),
    searchError,
    filter.parent && h('p', { class: 'scope', id: 'jobs-parent' }, 'Child jobs of ', jobLink(filter.parent), ' ',
      h('a', { href: listHref({ ...filter, parent: '' }), class: 'clear' }, 'all jobs')),
    h('div', { class: 'scroll' }, h('table', { class: 'list', id: 'jobs' },
      h('thead', null, h('tr', null, h('th', null, 'job'), h('th', null, 'state'), h('th', null, 'queue'), h('th', null, 'schedule'), h('th', null, 'submitted'))),
      tbody)),
    pager,
  );

  const kick = poller(signal, 5000, async () => {
    const q = new URLSearchParams({ limit: String(PAGE) });
    for (const k of FILTERS) if (filter[k]) q.set(k, filter[k]);
    if (cursors[page]) q.set('cursor', cursors[page]);
    const at = page;
    let answer;
    try {
      answer = await get('v1/jobs?' + q, { signal });
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 400)) throw err;
      // A filter the API refused (a search's bad value): said at its input.
      searchError.textContent = err.describe();
      searchError.hidden = false;
      if (inputs[err.field]) inputs[err.field].setAttribute('aria-invalid', 'true');
      tbody.replaceChildren(h('tr', null, h('td', { colspan: 5, class: 'empty' }, 'No jobs: the API refused the filter.')));
      pager.hidden = true;
      return;
    }
    if (at !== page) return; // the page changed meanwhile: its own load follows
    next = answer.next_cursor || '';
    const rows = (answer.jobs || []).map((j) =>
      h('tr', { 'data-job': j.id },
        h('td', null, jobLink(j.id)),
        h('td', null, pill(j.state)),
        h('td', null, h('a', { href: listHref({ ...filter, queue: j.queue }) }, j.queue)),
        h('td', null, j.schedule_id ? h('a', { href: listHref({ ...filter, schedule: j.schedule_id }) }, j.schedule_id) : ''),
        h('td', null, timeEl(ulidTime(j.id)?.toISOString()))));
    if (!rows.length) rows.push(h('tr', null, h('td', { colspan: 5, class: 'empty' }, page ? 'No older jobs.' : 'No jobs match.')));
    tbody.replaceChildren(...rows);
    newer.disabled = page === 0;
    older.disabled = !next;
    where.textContent = `page ${page + 1}`;
    pager.hidden = page === 0 && !next;
  });
}

// ---------------------------------------------------------------- one job

// drafts keeps what a person typed into a job's forms across the page's
// redraws, by job, step and field.
const drafts = new Map();

function draft(key, fallback = '') {
  return drafts.has(key) ? drafts.get(key) : fallback;
}

function bound(tag, key, attrs, fallback) {
  const el = h(tag, { ...attrs, oninput: (e) => drafts.set(key, e.target.value) });
  el.value = draft(key, fallback);
  return el;
}

function parseJSON(text, field) {
  if (text.trim() === '') return undefined;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new ApiError(400, 'invalid', `${field}: is not JSON (${err.message})`, field);
  }
}

// confirmButton asks for a second click before it acts: for what cannot be
// undone (cancel, reject).
function confirmButton(label, attrs, run) {
  let armed = null;
  const b = h('button', {
    type: 'button', ...attrs,
    onclick: () => {
      if (!armed) {
        b.textContent = `Confirm ${label.toLowerCase()}?`;
        b.classList.add('armed');
        armed = setTimeout(() => { armed = null; b.textContent = label; b.classList.remove('armed'); }, 4000);
        return;
      }
      clearTimeout(armed);
      armed = null;
      b.textContent = label;
      b.classList.remove('armed');
      run(b);
    },
  }, label);
  return b;
}

export function jobView({ signal, params, main }, id) {
  let job = null;
  let shown = '';
  const events = [];
  let seq = 0;

  const title = h('h1', null, 'Job ', h('span', { class: 'mono' }, id), ' ');
  const state = h('span', { id: 'job-state' });
  title.append(state);
  const facts = h('dl', { class: 'facts' });
  const budget = h('div', { id: 'job-budget' });
  const actions = h('div', { class: 'actions', id: 'job-actions' });
  const notice = h('p', { class: 'notice', id: 'job-notice', role: 'status' });
  notice.hidden = true;
  const graph = h('div', { class: 'graph' });
  const steps = h('div', { class: 'steps' });
  const timeline = h('ol', { class: 'timeline', id: 'events' });
  const follow = h('span', { class: 'muted' });
  const payload = h('details', null, h('summary', null, 'payload'));

  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/jobs' }, 'Jobs'), ' / ', h('span', { class: 'mono' }, id)),
    title, facts, budget, actions, notice,
    h('section', { class: 'card' }, h('h2', null, 'Graph'), graph),
    h('section', null, h('h2', null, 'Steps'), steps),
    h('section', { class: 'card' }, h('h2', null, 'Events ', follow), timeline),
    h('section', { class: 'card' }, payload),
  );

  function say(text) {
    notice.textContent = text;
    notice.hidden = false;
  }

  function select(stepId) {
    const card = steps.querySelector(`[data-step="${CSS.escape(stepId)}"]`);
    if (!card) return;
    card.scrollIntoView({ behavior: 'smooth', block: 'start' });
    card.classList.remove('flash');
    void card.offsetWidth; // restart the animation
    card.classList.add('flash');
  }

  // show draws the job when it changed; an action's answer shows at once.
  function show(j) {
    const text = JSON.stringify(j);
    if (text === shown) return;
    shown = text;
    job = j;
    state.replaceChildren(pill(j.state));
    renderFacts();
    renderBudget();
    renderActions();
    // A map's items are drawn as one node, its own, with their counts:
    // a map may have 10,000.
    const items = new Map();
    const top = j.steps.filter((st) => {
      if (!st.map_of) return true;
      if (!items.has(st.map_of)) items.set(st.map_of, []);
      items.get(st.map_of).push(st);
      return false;
    });
    graph.replaceChildren(drawDag(top, select));
    steps.replaceChildren(...top.map((st) => renderStep(st, items.get(st.id))));
    payload.replaceChildren(h('summary', null, 'payload'), json(j.payload));
  }

  function renderFacts() {
    const j = job;
    const row = (k, v) => (v === undefined || v === null || v === '' ? null : [h('dt', null, k), h('dd', null, v)]);
    facts.replaceChildren(...[
      row('queue', h('a', { href: listHref({ queue: j.queue }) }, j.queue)),
      row('priority', `P${j.priority}`),
      row('submitted', timeEl(j.created_at)),
      row('updated', timeEl(j.updated_at)),
      j.run_at && row('runs at', timeEl(j.run_at)),
      j.ended_at && row('ended', timeEl(j.ended_at)),
      j.ended_at && row('took', dur(j.created_at, j.ended_at)),
      j.expires_at && row('kept until', timeEl(j.expires_at)),
      j.schedule_id && row('schedule', h('a', { href: listHref({ schedule: j.schedule_id }) }, j.schedule_id)),
      j.parent && row('parent', h('span', { id: 'job-parent' },
        jobLink(j.parent.job, { 'data-job': j.parent.job }), ' step ',
        h('a', { class: 'mono', href: jobHref(j.parent.job, j.parent.step), 'data-step': j.parent.step }, j.parent.step),
        `, attempt ${j.parent.attempt}`)),
      j.children && j.children.length && row(j.children.length === 1 ? 'child job' : `child jobs (${j.children.length})`, renderChildren(j)),
      j.signals && j.signals.length && row('signals', j.signals.map((sg) => sg.name).join(', ')),
      j.cost && row('cost', renderCost(j.cost)),
      j.budget && row('budget', h('span', { id: 'job-budget-usd' }, dollars(j.budget.usd))),
    ].flat().filter(Boolean));
  }

  // renderCost says what the job cost so far and of what, and its usage
  // units on demand (kept open across redraws once opened).
  let unitsOpen = false;
  function renderCost(c) {
    const parts = [`engine ${costText(c.engine_usd)}`, `reported ${costText(c.reported_usd)}`];
    if (c.children_usd) parts.push(`children ${costText(c.children_usd)}`);
    const units = Object.entries(c.units || {}).filter(([, v]) => v);
    const details = units.length ? h('details', { id: 'job-cost-units', open: unitsOpen, ontoggle: (e) => { unitsOpen = e.currentTarget.open; } },
      h('summary', null, 'usage'),
      h('div', { class: 'scroll' }, h('table', { class: 'list units' },
        h('tbody', null, units.map(([k, v]) => h('tr', { 'data-unit': k },
          h('td', null, UNITS[k] || k),
          h('td', { class: 'num' }, Number(v).toLocaleString(undefined, { maximumSignificantDigits: 4 }))))))))
      : null;
    return h('div', { id: 'job-cost' },
      h('span', { class: 'cost-total' }, costText(c.usd)), ' ', h('span', { class: 'muted' }, `(${parts.join(', ')})`),
      details);
  }

  // renderBudget shows a job held at its budget gate: why, and a form to
  // raise its budget.
  function renderBudget() {
    const j = job;
    const b = j.budget;
    if (TERMINAL.has(j.state) || !b || !b.exceeded) {
      budget.className = '';
      budget.replaceChildren();
      return;
    }
    const why = b.message || `budget exceeded: ${dollars(b.exceeded.cost_usd)} of ${dollars(b.usd)}`;
    budget.className = 'budget-gate';
    budget.replaceChildren(
      h('p', { class: 'budget-why', role: 'status' }, h('strong', null, `Waiting: ${why}`), ' ',
        h('span', { class: 'muted' }, 'No further step starts until its budget is more than it has cost.')),
      budgetForm());
  }

  // budgetForm sets or raises the job's budget; the API's refusal shows
  // beside its input.
  function budgetForm() {
    const j = job;
    const b = j.budget;
    const exceeded = b && b.exceeded;
    const spent = Math.max(j.cost ? j.cost.usd : 0, (exceeded && exceeded.cost_usd) || 0);
    const key = `${id}//budget`;
    const error = h('p', { class: 'error', role: 'alert', id: 'budget-error' });
    error.hidden = true;
    // No min: what the API refuses (not more than the job's cost) it says
    // beside the input, in its own words.
    const usd = bound('input', key, {
      type: 'number', name: 'usd', step: 'any', inputmode: 'decimal', required: true,
      id: 'budget-usd', 'aria-label': 'budget in US dollars', placeholder: '0.00',
      title: `US dollars, more than the job has cost so far (${costText(spent)})`,
    });
    const label = exceeded ? 'Raise budget' : b ? 'Change budget' : 'Set budget';
    const button = h('button', { type: 'submit', class: exceeded ? 'primary' : null, 'data-action': 'budget' }, label);
    return h('form', {
      class: 'inline budget-form', id: 'budget-form',
      onsubmit: async (e) => {
        e.preventDefault();
        usd.removeAttribute('aria-invalid');
        await act(button, error, () => post(jobPath(id, 'budget'), { usd: Number(usd.value) }, { signal }), (answer) => {
          drafts.delete(key);
          say(`Budget set to ${dollars(answer.budget ? answer.budget.usd : Number(usd.value))}.`);
          show(answer);
          kick();
        });
        if (!error.hidden) usd.setAttribute('aria-invalid', 'true');
      },
    }, h('label', { for: 'budget-usd', class: 'muted' }, exceeded ? 'new budget $' : 'budget $'), usd, button, error);
  }

  // renderChildren links a job's children, in step order: the first few,
  // and the list of them all when there are more.
  function renderChildren(j) {
    const shown = j.children.slice(0, SHOWN_CHILDREN);
    const links = shown.flatMap((c, i) => [i ? ', ' : '', jobLink(c, { 'data-job': c })]);
    return h('span', { id: 'job-children' }, links,
      j.children.length > shown.length
        ? [' … ', h('a', { href: listHref({ parent: j.id }), class: 'all-children' }, `all ${j.children.length}`)]
        : null);
  }

  function renderActions() {
    const j = job;
    const out = [];
    const error = h('p', { class: 'error', role: 'alert' });
    error.hidden = true;
    const done = (what) => (answer) => {
      say(what);
      show(answer);
      kick();
    };
    if (!TERMINAL.has(j.state)) {
      out.push(confirmButton('Cancel', { class: 'danger', 'data-action': 'cancel' }, (b) =>
        act(b, error, () => post(jobPath(id, 'cancel'), undefined, { signal }), done('Cancelled.'))));
    }
    if (j.state === 'FAILED') {
      out.push(h('button', { type: 'button', 'data-action': 'redrive', onclick: (e) =>
        act(e.currentTarget, error, () => post(jobPath(id, 'redrive'), {}, { signal }), done('Redriven: its failed steps run again.')) }, 'Redrive'));
    }
    const waits = j.steps.filter((st) => st.action === 'wait' && !STEP_DONE.has(st.state));
    if (!TERMINAL.has(j.state) && waits.length) out.push(signalForm(waits, error, done));
    out.push(error);
    // With its own error beside it; a job held at its budget gate has this
    // form in its banner instead.
    if (!TERMINAL.has(j.state) && !(j.budget && j.budget.exceeded)) out.push(budgetForm());
    actions.replaceChildren(...out);
  }

  function signalForm(waits, error, done) {
    const base = `${id}//signal`;
    const waiting = waits.find((st) => st.state === 'WAITING') || waits[0];
    const name = bound('input', `${base}/name`, { name: 'name', required: true, 'aria-label': 'signal name', placeholder: 'name' }, waiting.signal || '');
    const body = bound('textarea', `${base}/payload`, { name: 'payload', rows: 1, 'aria-label': 'signal payload', placeholder: 'payload (JSON, optional)' });
    const sid = bound('input', `${base}/id`, { name: 'id', 'aria-label': 'signal id', placeholder: 'id (optional)' });
    const button = h('button', { type: 'submit', 'data-action': 'signal' }, 'Signal');
    return h('form', {
      class: 'inline',
      onsubmit: (e) => {
        e.preventDefault();
        act(button, error, async () => {
          const req = { name: name.value.trim() };
          const p = parseJSON(body.value, 'payload');
          if (p !== undefined) req.payload = p;
          if (sid.value.trim()) req.id = sid.value.trim();
          return post(jobPath(id, 'signal'), req, { signal });
        }, (answer) => {
          for (const k of ['name', 'payload', 'id']) drafts.delete(`${base}/${k}`);
          done(`Signal ${name.value.trim()} sent.`)(answer);
        });
      },
    }, name, body, sid, button);
  }

  // mapItems shows a map's items: how many are in each state, and each
  // (the first 500) on demand.
  function mapItems(st, kids) {
    const counts = new Map();
    for (const k of kids) counts.set(k.state, (counts.get(k.state) || 0) + 1);
    const shown = kids.slice(0, 500);
    return h('div', { class: 'map-items', 'data-map': st.id },
      h('p', { class: 'counts' }, `${kids.length} items: `,
        [...counts.entries()].map(([state, n]) => h('span', { class: 'count', 'data-count': state }, `${n} `, pill(state), ' '))),
      h('details', null, h('summary', null, kids.length > shown.length ? `the first ${shown.length} items` : 'items'),
        h('div', { class: 'scroll' }, h('table', { class: 'list' },
          h('thead', null, h('tr', null, ['item', 'state', 'attempt', 'output or error'].map((c) => h('th', null, c)))),
          h('tbody', null, shown.map((k) => h('tr', { 'data-item': k.id },
            h('td', { class: 'mono' }, k.id),
            h('td', null, pill(k.state)),
            h('td', null, k.attempt ? String(k.attempt) : ''),
            h('td', { class: 'wrap mono' }, k.error ? `${k.error.class}: ${k.error.message}` : k.output !== undefined ? JSON.stringify(k.output).slice(0, 120) : ''))))))));
  }

  function renderStep(st, kids) {
    const base = `${id}/${st.id}`;
    const error = h('p', { class: 'error', role: 'alert' });
    error.hidden = true;
    const done = (what) => (answer) => {
      for (const k of [...drafts.keys()]) if (k.startsWith(base + '/')) drafts.delete(k);
      say(what);
      show(answer);
      kick();
    };
    const row = (k, v) => (v === undefined || v === null || v === '' || (Array.isArray(v) && !v.length) ? null : [h('dt', null, k), h('dd', null, v)]);
    const child = stepChild(st);
    const facts = [
      row('child job', child && jobLink(child, { class: 'job-link mono child-link', 'data-child': child })),
      row('depends on', st.depends_on && st.depends_on.join(', ')),
      row('when', st.when && h('code', {}, st.when)), // its condition: false skipped it
      row('asks', st.prompt),
      row('waits for signal', st.signal),
      row('wakes', st.wake_at && timeEl(st.wake_at)),
      row('next run', st.next_run_at && timeEl(st.next_run_at)),
      row('deadline', st.deadline && timeEl(st.deadline)),
      row('parked', st.parked ? 'yes: no timer runs until its time is near' : ''),
      // A job step's lease, while its child runs, is the engine's: its child is the news.
      row('lease', st.lease && !st.child ? [`attempt ${st.lease.attempt}`, st.lease.worker && ` by ${st.lease.worker}`, st.lease.resource && ` on ${st.lease.resource}`, ', expires ', timeEl(st.lease.expires_at)] : null),
      row('requires', st.requires && JSON.stringify(st.requires)),
      row('waits for a slot on', st.resource_wait && st.resource_wait.on.join(', ')),
      row('avoids', st.avoid && st.avoid.join(', ')),
      row('replaced by', st.replaced_by && st.replaced_by.join(', ')),
      row('decision', st.decision && `${st.decision.approved ? 'approved' : 'rejected'}${st.decision.by ? ' by ' + st.decision.by : ''}${st.decision.comment ? ': ' + st.decision.comment : ''} (${st.decision.key})`),
      row('error', st.error && `${st.error.class}: ${st.error.message}`),
    ].flat().filter(Boolean);

    const forms = [];
    if (st.action === 'approval' && st.state === 'NEEDS_USER') {
      const by = bound('input', 'by', { name: 'by', 'aria-label': 'your name', placeholder: 'your name (optional)' });
      const comment = bound('input', `${base}/comment`, { name: 'comment', 'aria-label': 'comment', placeholder: 'comment (optional)' });
      const decision = () => {
        const d = {};
        if (by.value.trim()) d.by = by.value.trim();
        if (comment.value.trim()) d.comment = comment.value.trim();
        return d;
      };
      const approve = h('button', { type: 'button', class: 'primary', 'data-action': 'approve', 'data-step': st.id, onclick: () =>
        act(approve, error, () => post(jobPath(id, 'steps', st.id, 'approve'), decision(), { signal }), done(`Approved ${st.id}.`)) }, 'Approve');
      const reject = confirmButton('Reject', { class: 'danger', 'data-action': 'reject', 'data-step': st.id }, (b) =>
        act(b, error, () => post(jobPath(id, 'steps', st.id, 'reject'), decision(), { signal }), done(`Rejected ${st.id}.`)));
      forms.push(h('div', { class: 'inline gate' }, by, comment, approve, reject));
    } else if (st.state === 'NEEDS_USER') {
      const input = bound('textarea', `${base}/input`, { name: 'input', rows: 3, 'aria-label': 'input', placeholder: 'input (JSON, optional)' });
      const resume = h('button', { type: 'submit', class: 'primary', 'data-action': 'resume', 'data-step': st.id }, 'Resume');
      forms.push(h('form', {
        class: 'inline resume',
        onsubmit: (e) => {
          e.preventDefault();
          act(resume, error, () => {
            const v = parseJSON(input.value, 'input');
            return post(jobPath(id, 'steps', st.id, 'resume'), v === undefined ? {} : { input: v }, { signal });
          }, done(`Resumed ${st.id}.`));
        },
      }, input, resume));
    }

    const made = st.attempts && st.attempts.some((a) => a.child); // a job step's: each attempt its child
    const spent = st.attempts && st.attempts.some((a) => a.cost_usd); // a column only when one reported a cost
    const attempts = st.attempts && st.attempts.length
      ? h('div', { class: 'scroll' }, h('table', { class: 'list attempts' },
        h('thead', null, h('tr', null, ['#', 'state', made ? 'child job' : ['worker', 'resource'], 'started', 'took', spent ? 'cost' : [], 'error'].flat().map((c) => h('th', null, c)))),
        h('tbody', null, st.attempts.map((a) => h('tr', null,
          h('td', null, a.n),
          h('td', null, pill(a.state)),
          made ? h('td', null, a.child ? jobLink(a.child, { 'data-attempt-child': a.n }) : '') : [
            h('td', null, a.worker || ''),
            h('td', null, a.resource || '')],
          h('td', null, timeEl(a.started_at)),
          h('td', null, a.started_at ? dur(a.started_at, a.ended_at) + (a.ended_at ? '' : ' so far') : ''),
          spent ? h('td', { class: 'num', 'data-attempt-cost': a.n }, a.cost_usd ? dollars(a.cost_usd) : '') : null,
          h('td', { class: 'wrap' }, a.error ? `${a.error.class}: ${a.error.message}` : ''))))))
      : null;

    return h('article', { class: 'card step', 'data-step': st.id, id: `step-${st.id}` },
      h('header', null,
        h('h3', { class: 'mono' }, st.id),
        h('span', { 'data-step-state': st.id }, pill(st.state)),
        h('span', { class: 'muted' }, st.action),
        st.attempts && st.attempts.length ? h('span', { class: 'muted' }, `attempt ${st.attempt}${st.max_attempts ? ' of ' + st.max_attempts : ''}`) : null,
        st.cost_usd ? h('span', { class: 'muted step-cost', 'data-step-cost': st.id, title: 'what its attempts reported they spent' }, `spent ${dollars(st.cost_usd)}`) : null),
      facts.length ? h('dl', { class: 'facts' }, facts) : null,
      kids ? mapItems(st, kids) : null,
      forms,
      error,
      attempts,
      st.output !== undefined ? h('details', null, h('summary', null, 'output'), json(st.output)) : null,
      st.user_input !== undefined ? h('details', null, h('summary', null, 'user input'), json(st.user_input)) : null);
  }

  function addEvents(list) {
    const stick = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 30;
    for (const ev of list) {
      if (ev.seq <= seq) continue;
      seq = ev.seq;
      events.push(ev);
      const at = new Date(ev.at);
      timeline.append(h('li', { class: ['ev', 'ev-' + ev.type.split('_')[0]], 'data-seq': ev.seq },
        h('time', { datetime: ev.at, title: ev.at }, isNaN(at) ? ev.at : at.toLocaleTimeString([], { hour12: false }) + '.' + String(at.getMilliseconds()).padStart(3, '0')),
        h('span', { class: 'type' }, ev.type),
        ev.step ? h('span', { class: 'mono' }, ev.step + (ev.attempt ? ` #${ev.attempt}` : '')) : h('span', null),
        h('span', { class: 'detail' }, ev.detail || '')));
    }
    if (stick) timeline.scrollTop = timeline.scrollHeight;
  }

  // Following the job: the events route with after and wait long-polls
  // where the API offers it; where it does not (the answer repeats events
  // already seen, or comes back at once), this is plain polling every 2 s.
  // A finished job is looked at every 10 s (a person may redrive it).
  let longPoll = true;
  let kicked = null;
  const kick = () => kicked && kicked.abort();
  (async () => {
    try {
      show(await get(jobPath(id), { signal }));
      if (params && params.get('step')) select(params.get('step')); // a link to one step of the job
    } catch (err) {
      if (failed(err)) {
        hideBanner();
        main.replaceChildren(main.firstChild, h('p', { class: 'error', id: 'job-error' }, err instanceof ApiError ? err.describe() : String(err)));
      }
      return;
    }
    while (!signal.aborted) {
      const started = Date.now();
      let news = false;
      let honoured = false;
      try {
        const wait = longPoll && job && !TERMINAL.has(job.state) ? 10 : 0;
        let path = jobPath(id, 'events');
        if (longPoll) path += `?after=${seq}&wait=${wait}`;
        let answer;
        try {
          answer = await get(path, { signal });
        } catch (err) {
          if (!(longPoll && err instanceof ApiError && err.status === 400)) throw err;
          longPoll = false; // the API takes no after/wait: poll plainly
          continue;
        }
        const list = answer.events || [];
        honoured = longPoll && list.every((ev) => ev.seq > seq);
        news = list.some((ev) => ev.seq > seq);
        addEvents(list);
        if (news) show(await get(jobPath(id), { signal }));
        hideBanner();
      } catch (err) {
        if (!failed(err)) return;
      }
      follow.textContent = job && TERMINAL.has(job.state) ? '' : '(following)';
      const every = job && TERMINAL.has(job.state) ? 10000 : 2000;
      const gap = news && honoured ? 0 : Math.max(0, every - (Date.now() - started));
      kicked = new AbortController();
      const stop = () => kicked.abort();
      signal.addEventListener('abort', stop, { once: true });
      await sleep(gap, kicked.signal);
      signal.removeEventListener('abort', stop);
      kicked = null;
      await whenVisible(signal);
    }
  })();
}
