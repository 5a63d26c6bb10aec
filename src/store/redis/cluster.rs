//! A Redis Cluster as the stores use it: this crate's settings for a cluster client, and
//! whether every shard has a replica to wait for.

use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::{IntoConnectionInfo, RedisError};

use super::{CONNECTION_TIMEOUT, RESPONSE_TIMEOUT, RedisConnection};

/// A cluster client found from `seeds`, with this crate's bounded waits: four retries, from
/// 100 ms to 1 s apart, while the cluster moves a slot or promotes a replica.
pub(super) fn builder<T: IntoConnectionInfo>(seeds: Vec<T>) -> ClusterClientBuilder {
    ClusterClientBuilder::new(seeds)
        .connection_timeout(CONNECTION_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .retries(4)
        .min_retry_wait(100)
        .max_retry_wait(1000)
        .overall_response_timeout(Some(RESPONSE_TIMEOUT + Duration::from_secs(1)))
}

/// Whether every master that serves slots has at least one replica (from `CLUSTER NODES`):
/// then a write that must survive a failover can wait for one.
pub(super) async fn replicated_everywhere(
    connection: &mut RedisConnection,
) -> Result<bool, RedisError> {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(connection)
        .await?;
    Ok(every_master_has_a_replica(&nodes))
}

/// Reads `CLUSTER NODES`: one line per node, `<id> <address> <flags> <master id or -> ...`,
/// then the slots a master serves.
fn every_master_has_a_replica(nodes: &str) -> bool {
    let lines: Vec<Vec<&str>> = nodes
        .lines()
        .map(|line| line.split_whitespace().collect())
        .filter(|fields: &Vec<&str>| fields.len() >= 8)
        .collect();
    let flagged = |fields: &[&str], flag: &str| fields[2].split(',').any(|f| f == flag);
    let masters: Vec<&str> = lines
        .iter()
        .filter(|fields| flagged(fields, "master") && fields.len() > 8)
        .map(|fields| fields[0])
        .collect();
    !masters.is_empty()
        && masters.iter().all(|master| {
            lines.iter().any(|fields| {
                flagged(fields, "slave") && !flagged(fields, "fail") && fields[3] == *master
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7001@17001 master - 0 1 2 connected 5461-10922
a3 127.0.0.1:7002@17002 master - 0 1 3 connected 10923-16383
b1 127.0.0.1:7003@17003 slave a1 0 1 1 connected
b2 127.0.0.1:7004@17004 slave a2 0 1 2 connected
";

    #[test]
    fn a_master_without_a_replica_is_noticed() {
        assert!(!every_master_has_a_replica(NODES));
        let full = format!("{NODES}b3 127.0.0.1:7005@17005 slave a3 0 1 3 connected\n");
        assert!(every_master_has_a_replica(&full));
        let failed = format!("{NODES}b3 127.0.0.1:7005@17005 slave,fail a3 0 1 3 connected\n");
        assert!(!every_master_has_a_replica(&failed));
        assert!(!every_master_has_a_replica(""));
    }
}
