{% snapshot runners_snapshot %}
{{ config(unique_key='id', strategy='check', check_cols=['club', 'age']) }}
select id, name, club, age from {{ ref('runners') }}
{% endsnapshot %}
