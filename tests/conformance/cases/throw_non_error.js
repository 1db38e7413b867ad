// Throwing a non-Error value.
throw { reason: "plain object", n: 1 };
