// A cell awaiting a promise that nothing can settle fails instead of hanging.
await new Promise(() => {});
return "never";
