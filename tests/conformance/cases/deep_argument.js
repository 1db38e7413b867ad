// Arguments nested deeper than the bridge allows are refused in the guest (catchable).
let v = 0;
for (let i = 0; i < 200; i++) v = [v];
try {
  await tools.demo_echo({ v });
  return "sent";
} catch (e) {
  return { name: e.name, message: e.message };
}
