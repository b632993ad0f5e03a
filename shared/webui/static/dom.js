// Building DOM from data. Everything the API answers is put in as text
// (never as HTML), so a job's ids, payloads and messages cannot inject
// markup into the page.

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

function set(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

// h makes an HTML element: h('a', {href: '#/x', class: 'y'}, 'text', child).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  set(el, attrs);
  append(el, children);
  return el;
}

// s makes an SVG element.
export function s(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  set(el, attrs);
  append(el, children);
  return el;
}

// stateClass names the CSS class that colours a job, step or attempt state.
export function stateClass(state) {
  return 'st-' + String(state || '').toLowerCase().replace(/[^a-z_]/g, '');
}

export function pill(state) {
  return h('span', { class: ['pill', stateClass(state)] }, state || '-');
}

// fmtTime shows an RFC 3339 time in the browser's zone, with its age.
export function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  return `${d.toLocaleString()} (${ago(d)})`;
}

export function timeEl(iso) {
  if (!iso) return h('span', { class: 'muted' }, '-');
  return h('time', { datetime: iso, title: iso }, fmtTime(iso));
}

export function ago(d) {
  const secs = Math.round((Date.now() - d.getTime()) / 1000);
  const abs = Math.abs(secs);
  let v;
  if (abs < 60) v = `${abs}s`;
  else if (abs < 3600) v = `${Math.round(abs / 60)}m`;
  else if (abs < 86400) v = `${Math.round(abs / 3600)}h`;
  else v = `${Math.round(abs / 86400)}d`;
  return secs >= 0 ? `${v} ago` : `in ${v}`;
}

// ulidTime answers the time a ULID (every job id) was made, or null.
export function ulidTime(id) {
  const alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
  if (typeof id !== 'string' || id.length !== 26) return null;
  let ms = 0;
  for (const c of id.slice(0, 10).toUpperCase()) {
    const v = alphabet.indexOf(c);
    if (v < 0) return null;
    ms = ms * 32 + v;
  }
  return new Date(ms);
}

// json shows a JSON value, indented, as text.
export function json(v) {
  if (v === undefined) return h('span', { class: 'muted' }, '-');
  return h('pre', { class: 'json' }, JSON.stringify(v, null, 2));
}

export function dur(fromIso, toIso) {
  if (!fromIso) return '';
  const ms = (toIso ? new Date(toIso) : new Date()) - new Date(fromIso);
  if (isNaN(ms)) return '';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} m ${Math.round((ms % 60000) / 1000)} s`;
}

// jobHref is the address of a job's page; with a step, the page scrolls
// to that step's card.
export function jobHref(id, step) {
  return `#/jobs/${encodeURIComponent(id)}` + (step ? `?step=${encodeURIComponent(step)}` : '');
}

// stepChild answers a job step's child job: the one its running attempt
// waits on, else the one its latest attempt made ('' for any other step).
export function stepChild(st) {
  if (st.child) return st.child;
  for (const a of [...(st.attempts || [])].reverse()) if (a.child) return a.child;
  return '';
}

// dollars shows an amount of US dollars to the cent, or as finely as it
// needs below one, to a millionth: $0.50, $2.00, $0.0042.
export function dollars(v) {
  let s = Number(v || 0).toFixed(6).replace(/0+$/, '');
  const decimals = s.length - s.indexOf('.') - 1;
  if (decimals < 2) s += '0'.repeat(2 - decimals);
  return '$' + s;
}

// costText shows what something cost to a millionth of a dollar, as the
// CLI does: a job's engine cost is a few millionths.
export function costText(v) {
  return '$' + Number(v || 0).toFixed(6);
}
