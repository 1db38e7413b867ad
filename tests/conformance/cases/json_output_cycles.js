// O3: json() of cyclic, BigInt and function values.
const a = { name: "a" };
a.self = a;
a.list = [a, 1n, () => 2];
json(a);
json([Symbol("s"), new Map([["m", new Set([1])]])]);
return "ok";
