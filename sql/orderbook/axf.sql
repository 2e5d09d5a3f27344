-- Axfinder: per broker, the sum of ask volume minus bid volume over its bid/ask pairs whose prices differ by more than 2.
SELECT b.broker_id, SUM(a.volume - b.volume) AS axf
FROM bids b, asks a
WHERE b.broker_id = a.broker_id AND (a.price - b.price > 2 OR b.price - a.price > 2)
GROUP BY b.broker_id
