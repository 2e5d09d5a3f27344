-- Broker spread: per broker, the sum over pairs of its bids x later than y of x's value minus y's value (volume * price).
SELECT x.broker_id, SUM(x.volume * x.price - y.volume * y.price) AS bsp
FROM bids x, bids y
WHERE x.broker_id = y.broker_id AND x.t > y.t
GROUP BY x.broker_id
