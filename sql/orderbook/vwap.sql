-- VWAP: sum of price * volume over the bids whose higher-priced bids hold less than a quarter of the total bid volume.
SELECT SUM(b1.price * b1.volume) AS vwap
FROM bids b1
WHERE 0.25 * (SELECT SUM(b3.volume) FROM bids b3)
      > (SELECT SUM(b2.volume) FROM bids b2 WHERE b2.price > b1.price)
