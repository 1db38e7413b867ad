// Guest code that patches builtins cannot change how values cross the bridge.
JSON.stringify = () => '"hijacked"';
JSON.parse = () => "hijacked";
Array.prototype.push = function () { throw new Error("push patched"); };
Promise.prototype.then = function () { throw new Error("then patched"); };
Object.keys = () => [];
const r = await tools.demo_echo({ a: [1, 2] });
json({ b: 2 });
return r;
