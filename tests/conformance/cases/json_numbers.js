// Numbers parsed from JSON (JSON.parse in a cell, and every tool result) are the same doubles on
// every engine, also at the edges of quickjs-wasi's integer shortcut (integers of at most 15
// digits are read without strtod; longer ones, fractions and exponents still through it): signs,
// zero and minus zero, 15 and 16 digits, integers a double cannot hold, fractions and exponents.
const texts = ["0", "-0", "7", "-7", "123456789012345", "-999999999999999", "100000000000000",
  "1234567890123456", "9007199254740993", "-9007199254740993", "12345678901234567890", "1.5",
  "-0.0", "1e3", "1E-3", "0.1", "5e-324", "1.7976931348623157e308", "[1,-0,22,333]"];
const show = (v) => (Object.is(v, -0) ? "-0" : Array.isArray(v) ? v.map(show).join(",") : String(v));
const parsed = texts.map((t) => [t, show(JSON.parse(t))]);
const echoed = await tools.demo_echo({ n: texts.slice(0, -1).map(Number) });
return { parsed, echoed: echoed.n.map(show) };
