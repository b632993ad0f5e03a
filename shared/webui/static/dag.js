// Draws a job's steps as a graph, left to right, coloured by state.

import { jobHref, s, stateClass, stepChild } from './dom.js';

const W = 168; // node width
const H = 46; // node height
const GX = 56; // gap between columns
const GY = 14; // gap between rows
const PAD = 10;

// dependencies answers each step's dependencies as the engine reads them:
// when no step names depends_on, the steps run in order, each after the
// one before it (and a replan turns such a job into a chain of depends_on).
export function dependencies(steps) {
  const graph = steps.some((st) => st.depends_on && st.depends_on.length);
  const known = new Set(steps.map((st) => st.id));
  const deps = new Map();
  steps.forEach((st, i) => {
    const d = graph ? st.depends_on || [] : i > 0 ? [steps[i - 1].id] : [];
    deps.set(st.id, d.filter((x) => known.has(x)));
  });
  return deps;
}

// layout places each step in the column after its deepest dependency, and
// orders each column by where its dependencies sit (fewer crossings).
export function layout(steps) {
  const deps = dependencies(steps);
  const col = new Map();
  const depth = (id, seen) => {
    if (col.has(id)) return col.get(id);
    if (seen.has(id)) return 0; // a cycle: the API refuses them, but never loop
    seen.add(id);
    const d = deps.get(id) || [];
    const c = d.length ? 1 + Math.max(...d.map((x) => depth(x, seen))) : 0;
    col.set(id, c);
    return c;
  };
  steps.forEach((st) => depth(st.id, new Set()));
  const columns = [];
  steps.forEach((st, i) => {
    const c = col.get(st.id);
    (columns[c] ||= []).push({ step: st, order: i });
  });
  const row = new Map();
  for (const column of columns) {
    if (!column) continue;
    for (const n of column) {
      const d = deps.get(n.step.id);
      n.key = d.length ? d.reduce((sum, x) => sum + row.get(x), 0) / d.length : n.order;
    }
    column.sort((a, b) => a.key - b.key || a.order - b.order);
    column.forEach((n, r) => row.set(n.step.id, r));
  }
  const pos = new Map();
  for (const [id, c] of col) {
    pos.set(id, { x: PAD + c * (W + GX), y: PAD + row.get(id) * (H + GY) });
  }
  const rows = Math.max(1, ...columns.filter(Boolean).map((c) => c.length));
  return {
    deps,
    pos,
    width: PAD * 2 + columns.length * W + Math.max(0, columns.length - 1) * GX,
    height: PAD * 2 + rows * H + (rows - 1) * GY,
  };
}

function clip(text, n) {
  return text.length > n ? text.slice(0, n - 1) + '…' : text;
}

// childLink links a job step's node to its child job, at the node's top
// right (its id clipped shorter); following it selects no step.
function childLink(id) {
  const keep = (e) => e.stopPropagation(); // the node's click and Enter select its card
  return s('a', { class: 'child-link', href: jobHref(id), 'data-child': id, onclick: keep, onkeydown: keep },
    s('title', null, `child job ${id}`),
    s('text', { x: W - 10, y: 19, 'text-anchor': 'end' }, 'child ↗'));
}

// drawDag answers an <svg> of the steps; onSelect(stepId) on a click.
export function drawDag(steps, onSelect) {
  const { deps, pos, width, height } = layout(steps);
  const byId = new Map(steps.map((st) => [st.id, st]));
  const svg = s('svg', {
    class: 'dag',
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: 'img',
    'aria-label': 'step graph',
  });
  svg.append(
    s('defs', null,
      s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
        s('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: 'arrowhead' }))),
  );
  for (const st of steps) {
    const to = pos.get(st.id);
    for (const d of deps.get(st.id)) {
      const from = pos.get(d);
      const x1 = from.x + W, y1 = from.y + H / 2, x2 = to.x, y2 = to.y + H / 2;
      const mx = (x1 + x2) / 2;
      const done = ['SUCCEEDED', 'SKIPPED'].includes(byId.get(d).state); // either lets what depends on it go on
      svg.append(s('path', {
        class: ['edge', done && 'done'],
        d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2 - 2} ${y2}`,
        'marker-end': 'url(#arrow)',
      }));
    }
  }
  for (const st of steps) {
    const p = pos.get(st.id);
    const sub = [st.state, st.action, st.replaced_by && st.replaced_by.length ? 'replaced' : '']
      .filter(Boolean).join(' · ');
    const child = stepChild(st);
    const g = s('g', {
      class: ['node', stateClass(st.state)],
      transform: `translate(${p.x} ${p.y})`,
      tabindex: 0,
      role: 'button',
      'data-step': st.id,
      onclick: () => onSelect(st.id),
      onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); onSelect(st.id); } },
    },
    s('title', null, `${st.id}: ${st.state} (${st.action}), attempt ${st.attempt}`),
    s('rect', { width: W, height: H, rx: 7 }),
    s('text', { x: 10, y: 19, class: 'id' }, clip(st.id, child ? 12 : 20)),
    s('text', { x: 10, y: 36, class: 'sub' }, clip(sub, 26)),
    child && childLink(child));
    svg.append(g);
  }
  return svg;
}
