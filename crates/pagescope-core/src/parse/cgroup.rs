//! `/proc/PID/cgroup`: `hierarchy-ID:controllers:path` lines (man 7
//! cgroups).

/// The cgroup path of a process: the cgroup v2 (`0::`) line if there is
/// one, else the first line's path; empty if the text has neither.
pub fn path(text: &str) -> String {
    let mut first = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(_ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" {
            return path.to_string();
        }
        first.get_or_insert(path);
    }
    first.unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn v2_and_v1() {
        assert_eq!(
            super::path("0::/system.slice/sshd.service\n"),
            "/system.slice/sshd.service"
        );
        assert_eq!(
            super::path("12:memory:/user/1000\n11:cpu:/\n"),
            "/user/1000"
        );
        assert_eq!(super::path(""), "");
    }
}
