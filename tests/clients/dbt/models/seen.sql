{{ config(materialized='incremental', unique_key='id') }}
select id, name, club, age from {{ ref('runners') }}
{% if is_incremental() %}
where id >= (select max(id) from {{ this }})
{% endif %}
