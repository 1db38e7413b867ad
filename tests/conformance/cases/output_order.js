// contract O1: output items follow guest call order; text(), json() and console.log all append.
text("first");
json({ second: 2 });
console.log("third", 3, { four: 4 });
text(5);
text({ six: [6] });
json(undefined);
json(10n);
return "done";
