// A JSON or YAML editor for what the API takes as JSON (a job spec, a
// schedule's job), which points at the line of a field the API refused.

import { ApiError } from './api.js';
import { h } from './dom.js';
import { CORE_SCHEMA, dump, load } from './js-yaml.js';

// YAML is read in its core schema (YAML 1.2's): plain JSON values, no
// timestamps turned into dates, no merge keys.
const yamlOptions = { schema: CORE_SCHEMA };

// pathSegments splits an API field path (steps[0].action.queue) into
// member names and indices: ['steps', 0, 'action', 'queue'].
export function pathSegments(field) {
  const out = [];
  for (const m of String(field || '').matchAll(/\[(\d+)\]|[^.[\]]+/g)) {
    out.push(m[1] !== undefined ? Number(m[1]) : m[0]);
  }
  return out;
}

// lineAt answers the line (from 1) of offset in text.
function lineAt(text, offset) {
  let line = 1;
  for (let i = 0; i < offset && i < text.length; i++) if (text[i] === '\n') line++;
  return line;
}

// jsonOffsets answers where each path of a JSON text starts: a member at
// its name, an element at its value. It answers null for text that is not
// JSON (JSON.parse says why).
function jsonOffsets(text) {
  const at = new Map();
  let i = 0;
  const ws = () => { while (i < text.length && ' \t\r\n'.includes(text[i])) i++; };
  const str = () => {
    const start = i++;
    while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    i++;
    return JSON.parse(text.slice(start, i));
  };
  const value = (path) => {
    ws();
    if (!at.has(path)) at.set(path, i);
    const c = text[i];
    if (c === '{') {
      i++;
      ws();
      while (i < text.length && text[i] !== '}') {
        const keyAt = i;
        const key = str();
        const p = path ? `${path}.${key}` : key;
        at.set(p, keyAt);
        ws();
        i++; // the colon
        value(p);
        ws();
        if (text[i] === ',') { i++; ws(); }
      }
      i++;
    } else if (c === '[') {
      i++;
      ws();
      for (let n = 0; i < text.length && text[i] !== ']'; n++) {
        value(`${path}[${n}]`);
        ws();
        if (text[i] === ',') { i++; ws(); }
      }
      i++;
    } else if (c === '"') {
      str();
    } else {
      while (i < text.length && !',}] \t\r\n'.includes(text[i])) i++;
    }
  };
  try {
    JSON.parse(text);
    value('');
  } catch {
    return null;
  }
  return at;
}

// locateJSON answers the line of field in a JSON text, or of the nearest
// enclosing field it has (a missing member's object); 0 when none.
function locateJSON(text, field) {
  const at = jsonOffsets(text);
  if (!at) return 0;
  const segs = pathSegments(field);
  for (let n = segs.length; n >= 0; n--) {
    const p = segs.slice(0, n).reduce((acc, s) => (typeof s === 'number' ? `${acc}[${s}]` : acc ? `${acc}.${s}` : s), '');
    if (at.has(p)) return lineAt(text, at.get(p));
  }
  return 0;
}

// locateYAML answers the line of field in a YAML text by its block
// structure (a member is a "name:" line, an element a "- " line, each
// within its parent's indented block), or of the nearest enclosing field
// found: what a flow mapping ({type: worker}) holds is on its line.
function locateYAML(text, field) {
  const lines = text.split('\n').map((raw) => {
    const m = /^( *)((?:- +)*)(.*)$/.exec(raw);
    const blank = /^\s*(#.*)?$/.test(m[3]) && !m[2];
    return { indent: m[1].length, dash: m[2].length > 0, keyIndent: m[1].length + m[2].length, rest: m[3], blank };
  });
  let from = 0;
  let to = lines.length;
  let found = 0;
  // blockEnd answers where the block opened at line i (indented past
  // indent, or a list at indent under a key) ends.
  const blockEnd = (i, indent, listAtSame) => {
    let k = i + 1;
    for (; k < to; k++) {
      const l = lines[k];
      if (l.blank) continue;
      if (l.indent > indent || (listAtSame && l.dash && l.indent === indent)) continue;
      break;
    }
    return k;
  };
  for (const seg of pathSegments(field)) {
    let hit = -1;
    if (typeof seg === 'number') {
      let dashIndent = -1;
      let n = -1;
      for (let k = from; k < to; k++) {
        const l = lines[k];
        if (l.blank || !l.dash) continue;
        if (dashIndent < 0) dashIndent = l.indent;
        if (l.indent === dashIndent && ++n === seg) { hit = k; break; }
      }
      if (hit < 0) break;
      from = hit;
      to = blockEnd(hit, lines[hit].indent, false);
      // The element's first member shares its line: seen as a key there.
      lines[hit] = { ...lines[hit], dash: false, indent: lines[hit].keyIndent };
    } else {
      const key = new RegExp(`^(["']?)${seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\1\\s*:(\\s|$)`);
      let keyIndent = -1;
      for (let k = from; k < to; k++) {
        const l = lines[k];
        if (l.blank) continue;
        if (keyIndent < 0) keyIndent = l.keyIndent;
        if (l.keyIndent === keyIndent && key.test(l.rest)) { hit = k; break; }
      }
      if (hit < 0) break;
      const inline = lines[hit].rest.replace(key, '').trim();
      from = hit + 1;
      to = inline && !inline.startsWith('#') && !/^[|>]/.test(inline) ? hit + 1 : blockEnd(hit, lines[hit].keyIndent, true);
    }
    found = hit + 1;
    if (from >= to) break; // its value is on its line
  }
  return found;
}

// locate answers the line (from 1) of an API field path in text written in
// format ('json' or 'yaml'), or of its nearest enclosing field there; 0 if
// none is found.
export function locate(text, format, field) {
  return format === 'yaml' ? locateYAML(text, field) : locateJSON(text, field);
}

// parse reads text in format; text that is neither answers an ApiError as
// the API would, naming the body and the line at fault.
export function parse(text, format) {
  try {
    return format === 'yaml' ? load(text, yamlOptions) : JSON.parse(text);
  } catch (err) {
    let line = 0;
    let message = err.message;
    if (format === 'yaml' && err.mark) {
      line = err.mark.line + 1;
      message = err.reason || message;
    } else {
      const pos = /position (\d+)/.exec(err.message);
      if (pos) line = lineAt(text, Number(pos[1]));
    }
    const e = new ApiError(400, 'invalid', `not ${format === 'yaml' ? 'YAML' : 'JSON'}: ${message}`);
    e.local = true; // the page's own finding: nothing was sent
    e.line = line;
    throw e;
  }
}

export function render(value, format) {
  return format === 'yaml' ? dump(value, { ...yamlOptions, lineWidth: -1, noRefs: true }) : JSON.stringify(value, null, 2) + '\n';
}

// specEditor answers an editor of a JSON value: { el, value(), set(v),
// fail(err, prefix), clear() }. A field the API names in err (under
// prefix: 'job.' for a schedule's job) is pointed at: its line is marked
// and selected, and the message says which line.
export function specEditor({ id, label, text = '', format = 'json', onChange }) {
  let fmt = format;
  const area = h('textarea', {
    id, name: id, rows: 18, spellcheck: 'false', autocomplete: 'off', wrap: 'off', 'aria-label': label,
    'aria-describedby': `${id}-error`,
  });
  area.value = text;
  const gutter = h('div', { class: 'gutter', 'aria-hidden': 'true' });
  const error = h('p', { class: 'error', id: `${id}-error`, role: 'alert' });
  error.hidden = true;
  let marked = 0;

  const drawGutter = () => {
    const n = area.value.split('\n').length;
    const nums = [];
    for (let i = 1; i <= n; i++) nums.push(h('span', { class: ['ln', i === marked && 'err'] }, String(i)));
    gutter.replaceChildren(...nums);
    gutter.scrollTop = area.scrollTop;
  };
  area.addEventListener('scroll', () => { gutter.scrollTop = area.scrollTop; });
  area.addEventListener('input', () => {
    if (onChange) onChange(area.value, fmt);
    drawGutter();
  });

  const formats = h('div', { class: 'segmented', role: 'radiogroup', 'aria-label': 'format' },
    ['json', 'yaml'].map((f) => h('label', null,
      h('input', { type: 'radio', name: `${id}-format`, value: f, checked: f === fmt, onchange: () => switchTo(f) }),
      f.toUpperCase())));

  // switchTo writes the text anew in format f; text that does not read
  // stays as it is, in its format, and says why.
  function switchTo(f) {
    if (f === fmt) return;
    try {
      const v = area.value.trim() ? parse(area.value, fmt) : undefined;
      fmt = f;
      if (v !== undefined) area.value = render(v, fmt);
      clear();
      if (onChange) onChange(area.value, fmt);
    } catch (err) {
      for (const r of formats.querySelectorAll('input')) r.checked = r.value === fmt;
      fail(err);
    }
    drawGutter();
  }

  function clear() {
    error.hidden = true;
    marked = 0;
    area.removeAttribute('aria-invalid');
    drawGutter();
  }

  // fail shows err when it is about this editor's text (a parse error, or
  // a field under prefix), and answers whether it was.
  function fail(err, prefix = '') {
    const field = err.field || '';
    let line = err.line || 0;
    if (!err.local) {
      if (!field || (prefix && field !== prefix.slice(0, -1) && !field.startsWith(prefix))) return false;
      const sub = field.slice(prefix.length);
      line = sub === '' || sub === 'body' ? 1 : locate(area.value, fmt, sub) || 1;
    }
    marked = line;
    const what = err.local ? err.message : err instanceof ApiError ? err.describe() : String(err);
    error.textContent = (line ? `line ${line}: ` : '') + what;
    error.hidden = false;
    area.setAttribute('aria-invalid', 'true');
    drawGutter();
    if (line) {
      const lines = area.value.split('\n');
      const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
      area.focus();
      area.setSelectionRange(start, start + (lines[line - 1] || '').length);
      const lh = parseFloat(getComputedStyle(area).lineHeight) || 18;
      area.scrollTop = Math.max(0, (line - 3) * lh);
    }
    return true;
  }

  drawGutter();
  return {
    el: h('div', { class: 'spec-editor' },
      h('div', { class: 'editor-bar' }, h('label', { for: id }, label), formats),
      h('div', { class: 'editor' }, gutter, area),
      error),
    area,
    format: () => fmt,
    value: () => parse(area.value, fmt),
    set(v) {
      area.value = render(v, fmt);
      clear();
      if (onChange) onChange(area.value, fmt);
    },
    fail,
    clear,
  };
}
