// Objects whose own properties an engine may read straight from its object layout (quickjs-wasi's
// plainJson walks the shape) cross the bridge in exactly JSON.stringify's key order and content:
// deleted and re-added properties, non-enumerable ones, symbol keys, array-index keys (which come
// first, in numeric order), index-like keys that are no index, non-ASCII and escaped keys,
// null-prototype objects, many properties, and an accessor after plain properties (the whole value
// then takes the prelude's path, which runs the getter once).
const sym = Symbol("s");
const deleted = { a: 1, b: 2, c: 3 };
delete deleted.b;
const readded = { x: 1, y: 2 };
delete readded.x;
readded.x = 3;
const hidden = { shown: 1 };
Object.defineProperty(hidden, "hidden", { value: 2, enumerable: false });
hidden.after = 3;
const withSymbol = { before: 1, [sym]: 2, after: 3 };
const indices = { b: 1, 10: "ten", a: 2, 2: "two", 4294967294: "max index", 4294967295: "no index", "-1": "neg", "01": "lead" };
const nonAscii = { plain: 1, "é": 2, "漢字": 3, last: 4 };
const latin1Keys = { plain: 1, "é": 2, "x\u00ff": 3 };
const escaped = { 'q"uote': 1, "back\\slash": 2, "new\nline": 3, "\u0001": 4, "": 5 };
const nullProto = Object.create(null);
nullProto.z = { y: { x: [1, { w: null }] } };
nullProto.a = true;
const many = {};
for (let i = 0; i < 40; i++) many["k" + ((i * 7) % 40)] = i;
let reads = 0;
const accessorLate = { a: 1, b: 2, get c() { reads += 1; return reads; } };
const nested = { outer: { deleted, readded, hidden, withSymbol }, list: [indices, nonAscii, { escaped }], nullProto, many };

const mismatches = [];
const echoed = {};
for (const [name, value] of Object.entries({ nested, indices, nonAscii, latin1Keys, escaped, many })) {
  const out = await tools.demo_echo({ value });
  echoed[name] = JSON.stringify(out.value);
  if (echoed[name] !== JSON.stringify(value)) mismatches.push(name);
}
const late = await tools.demo_echo({ value: accessorLate });
return { mismatches, echoed, accessorLate: late.value, getterReadsSending: reads };
