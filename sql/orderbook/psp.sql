-- Price spread: sum of ask price minus bid price over bid/ask pairs each above 0.0001 of its side's total volume.
SELECT SUM(a.price - b.price) AS psp
FROM bids b, asks a
WHERE b.volume > 0.0001 * (SELECT SUM(b2.volume) FROM bids b2)
  AND a.volume > 0.0001 * (SELECT SUM(a2.volume) FROM asks a2)
