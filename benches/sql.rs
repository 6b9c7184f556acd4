//! A statement of a warehouse's own at routing time (issue: your own queries): its class and plan
//! features from its SQL alone (`history::featurize_statement`: one tokenization, the class, the
//! parse tree, the 34 features), its class alone (`QueryClass::of`), and a class already known
//! (a hash-map lookup of its id). Three texts: a dashboard query (120 characters), TPC-H Q5 (about
//! 600) and a long reporting query (about 1,900, the length of an average TPC-DS query). One core.
//! Run with `make bench`.

use std::collections::HashMap;

use autoslo_core::history::featurize_statement;
use autoslo_core::plan::PlanSchema;
use autoslo_core::sql::{sql_summary, Dialect, QueryClass};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

const DASHBOARD: &str = "select region, sum(amount) as revenue from sales where sale_date >= '2024-05-01' and channel = 'web' group by region order by 2 desc limit 20";

const TPCH_Q5: &str = "select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
from customer, orders, lineitem, supplier, nation, region
where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey
  and r_name = 'ASIA' and o_orderdate >= date '1994-01-01'
  and o_orderdate < date '1994-01-01' + interval '1' year
group by n_name order by revenue desc";

const LONG: &str = "with frequent_ss_items as (
  select substr(i_item_desc, 1, 30) itemdesc, i_item_sk item_sk, d_date solddate, count(*) cnt
  from store_sales, date_dim, item
  where ss_sold_date_sk = d_date_sk and ss_item_sk = i_item_sk and d_year in (2000, 2001, 2002, 2003)
  group by substr(i_item_desc, 1, 30), i_item_sk, d_date having count(*) > 4),
max_store_sales as (
  select max(csales) tpcds_cmax
  from (select c_customer_sk, sum(ss_quantity * ss_sales_price) csales
        from store_sales, customer, date_dim
        where ss_customer_sk = c_customer_sk and ss_sold_date_sk = d_date_sk and d_year in (2000, 2001, 2002, 2003)
        group by c_customer_sk) x),
best_ss_customer as (
  select c_customer_sk, sum(ss_quantity * ss_sales_price) ssales
  from store_sales, customer
  where ss_customer_sk = c_customer_sk
  group by c_customer_sk
  having sum(ss_quantity * ss_sales_price) > (95 / 100.0) * (select * from max_store_sales))
select c_last_name, c_first_name, sales
from (select c_last_name, c_first_name, sum(cs_quantity * cs_list_price) sales
      from catalog_sales, customer, date_dim
      where d_year = 2000 and d_moy = 2 and cs_sold_date_sk = d_date_sk
        and cs_item_sk in (select item_sk from frequent_ss_items)
        and cs_bill_customer_sk in (select c_customer_sk from best_ss_customer)
        and cs_bill_customer_sk = c_customer_sk
      group by c_last_name, c_first_name
      union all
      select c_last_name, c_first_name, sum(ws_quantity * ws_list_price) sales
      from web_sales, customer, date_dim
      where d_year = 2000 and d_moy = 2 and ws_sold_date_sk = d_date_sk
        and ws_item_sk in (select item_sk from frequent_ss_items)
        and ws_bill_customer_sk in (select c_customer_sk from best_ss_customer)
        and ws_bill_customer_sk = c_customer_sk
      group by c_last_name, c_first_name) y
order by c_last_name, c_first_name, sales
limit 100";

fn statements(c: &mut Criterion) {
    let texts = [("dashboard", DASHBOARD), ("tpch_q5", TPCH_Q5), ("long", LONG)];
    let summaries: Vec<_> = texts.iter().map(|(_, t)| sql_summary(t, Dialect::Redshift).expect("the bench's texts parse")).collect();
    let schema = PlanSchema::fit(summaries.iter().map(|s| (s, 1.0)));
    let mut g = c.benchmark_group("sql");
    for (name, text) in texts {
        g.bench_with_input(BenchmarkId::new("featurize_statement", name), &text, |b, t| b.iter(|| black_box(featurize_statement(t, Dialect::Redshift, &schema).unwrap())));
        g.bench_with_input(BenchmarkId::new("class", name), &text, |b, t| b.iter(|| black_box(QueryClass::of(t, Dialect::Redshift).unwrap())));
    }
    let known: HashMap<u64, [f32; 34]> = (0..10_000u64).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15), [0.0; 34])).collect();
    let id = 77u64.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    g.bench_function("cached_class", |b| b.iter(|| black_box(known.get(black_box(&id)))));
    g.finish();
}

criterion_group!(benches, statements);
criterion_main!(benches);
