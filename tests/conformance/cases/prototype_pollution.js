// Prototype pollution through tool results is impossible: __proto__/constructor/prototype keys are dropped.
const r = await tools.conformance_pollute({});
function naiveMerge(target, src) {
  for (const k in src) {
    if (src[k] && typeof src[k] === "object") {
      target[k] = naiveMerge(target[k] || {}, src[k]);
    } else {
      target[k] = src[k];
    }
  }
  return target;
}
naiveMerge({}, r);
Object.assign({}, r);
return { keys: Object.keys(r), nested: r.nested, pollutedObject: ({}).polluted, pollutedArray: [].polluted };
