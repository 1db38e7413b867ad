// tools.call returns the raw result: { details, content }; tools.callValue returns details only.
const raw = await tools.call("plugin:demo:demo_customer_get", { id: "C-02" });
const value = await tools.callValue("plugin:demo:demo_customer_get", { id: "C-02" });
const noInput = await tools.callValue("plugin:demo:demo_echo");
return { raw, value, noInput };
