{{ config(materialized='table') }}
select club, count(*) as runners, max(age) as oldest
from {{ ref('runners') }}
group by club
