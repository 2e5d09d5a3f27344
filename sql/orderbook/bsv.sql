-- Broker variance: per broker, half the sum over pairs of its bids x, y of x's value times y's value (volume * price).
SELECT x.broker_id, SUM(x.volume * x.price * y.volume * y.price * 0.5) AS bsv
FROM bids x, bids y
WHERE x.broker_id = y.broker_id
GROUP BY x.broker_id
