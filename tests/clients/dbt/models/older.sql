{{ config(materialized='view') }}
select id, name, age from {{ ref('runners') }} where age > 30
