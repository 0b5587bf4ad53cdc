"""berth.Database, the database a stack file declares (docs/stacks.md)."""

import unittest

import berth


class DatabaseDeclarationTest(unittest.TestCase):
    def test_member_and_secret_name(self):
        db = berth.Database("main-db", engine="redis", memory=512)
        self.assertEqual(db.secret_name, "DB_MAIN_DB_URL")
        self.assertEqual(db.stack_member(), {"kind": "database", "name": "main-db", "engine": "redis", "memory": 512})
        self.assertEqual(berth.Database("main").stack_member(), {"kind": "database", "name": "main", "engine": "postgres"})

    def test_bad_declarations_name_the_cause(self):
        with self.assertRaisesRegex(ValueError, "database name 'Main' is not valid"):
            berth.Database("Main")
        with self.assertRaisesRegex(ValueError, "engine 'mysql' is not one berth runs"):
            berth.Database("main", engine="mysql")
        with self.assertRaisesRegex(ValueError, "cpu must be a positive number"):
            berth.Database("main", cpu=0)
        with self.assertRaisesRegex(ValueError, "memory must be a positive number"):
            berth.Database("main", memory=True)


if __name__ == "__main__":
    unittest.main()
